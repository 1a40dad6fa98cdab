"""Where items come from: the rig stores and their index, item sources, the item commands, the rigs."""

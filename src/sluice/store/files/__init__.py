"""The files people edit (the town config, the policy) and the file rules every store shares."""

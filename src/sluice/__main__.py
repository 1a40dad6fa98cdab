from sluice.surfaces.cli import main

main()

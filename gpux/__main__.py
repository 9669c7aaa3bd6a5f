from gpux.cli import main

main()

from gpux.cli.main import main

main()

"""The command line: click parsing, the work behind each command, rendering and exit codes; nothing imports it."""

"""The command-line entry points that are more than a dispatch (dpconform/cli.py names each subcommand's
module): the top layer, which may import the checks, the scenarios and the reference plugins' tables."""

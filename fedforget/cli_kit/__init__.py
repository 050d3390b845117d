"""What every ``fedforget`` command is built with, the shared ones and each method's alike: how a command
fails (:mod:`~fedforget.cli_kit.errors`), its console, options and checked store (:mod:`~fedforget.cli_kit.support`).
It sits below the methods, which add their own commands with it, and reads only core and the store."""

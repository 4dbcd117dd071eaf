"""The search loop and the command line. Depends on every other package; nothing imports it."""

"""The `strongroom` command line: thin wrappers that parse, call and print."""

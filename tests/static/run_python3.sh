#!/bin/sh
# Runs a Python script with the host's python3 (there is no `python` for py_test here).
exec python3 "$@"

#!/bin/sh
# Fails when a line under a section ends with a period.
grep -n '^- .*\.$' "$1" && exit 1
exit 0

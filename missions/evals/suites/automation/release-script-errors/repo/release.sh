#!/bin/sh
# Checks, then the release note. CHECK_FAILS=1 makes the check fail (the tests use it).
mkdir -p out
rm -f out/release.txt
sh checks.sh
version=$(cat VERSION)
echo "release $version for $CHANNEL" > out/release.txt

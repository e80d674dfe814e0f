#!/bin/sh
if [ "${CHECK_FAILS:-0}" = 1 ]; then echo 'check failed' >&2; exit 3; fi
echo 'checks passed'

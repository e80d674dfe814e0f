#!/bin/sh
set -eu
tar -czf /backups/$(date +%F).tar.gz /srv/data

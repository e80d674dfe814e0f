"""Backup and restore of a whole install: `archive` writes one encrypted archive (`sealed`),
`restore` puts it onto an empty install here or elsewhere, `verify` proves an archive restorable,
`schedule` makes the nightly one. The drill is in docs/operations.md."""

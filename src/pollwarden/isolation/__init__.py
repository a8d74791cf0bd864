"""The broker: the credential, the audit keys and the approvals under an OS user of their own.

`peers` (who connected, by the kernel; the --agents and --approvers lists), `checks` (what the broker refuses to
start with), `protocol` (the socket's first line), `service` (the socket and each connection), `people` (a
person's command at the broker), `commands` (which commands it runs: `cli.brokered` runs one, in a process of its
own), `remote` (`--connect` on a person's command), `shim` (`pollwarden mcp --connect`), `systemd` (the unit it
prints). docs/agents.md, "The broker", tells the model.
"""

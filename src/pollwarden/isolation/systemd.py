"""The systemd unit `pollwarden broker --print-systemd-unit` prints: the broker under a user of its own."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def systemd_unit(
    *,
    executable: str | None,
    contracts: str | None,
    agents: str | None,
    approvers: str | None,
    console_port: int | None,
) -> str:
    program = executable or (str(Path(sys.argv[0]).resolve()) if sys.argv and sys.argv[0] else "pollwarden")
    words = [
        program,
        "broker",
        "--home",
        "${STATE_DIRECTORY}",
        "--contracts",
        contracts or "/etc/pollwarden/contracts",
        "--socket",
        "${RUNTIME_DIRECTORY}/broker.sock",
        "--agents",
        agents or "@pollwarden-agents",
        "--approvers",
        approvers or "@pollwarden-approvers",
        "--secrets",
        "${CREDENTIALS_DIRECTORY}/secrets",
    ]
    if console_port is not None:
        words += ["--console-port", str(console_port)]
    command = " ".join(w if w.startswith("${") else shlex.quote(w) for w in words)
    return f"""\
# pollwarden broker: holds the provider credentials, the audit keys and the approvals under a user of its own.
# Install: useradd --system --user-group pollwarden; groupadd pollwarden-agents; groupadd pollwarden-approvers;
#   put the agents' and the approvers' users in those groups AND in the group pollwarden (the socket's group);
#   write the credentials as KEY=VALUE lines to /etc/pollwarden/secrets (root, mode 0600);
#   copy this to /etc/systemd/system/pollwarden-broker.service; systemctl enable --now pollwarden-broker
# Agents: pollwarden mcp --connect /run/pollwarden/broker.sock
# People: pollwarden decide D --option 1 --connect /run/pollwarden/broker.sock
[Unit]
Description=pollwarden broker (credentials, audit keys and approvals for agents waiting on external jobs)
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
User=pollwarden
Group=pollwarden
StateDirectory=pollwarden
StateDirectoryMode=0700
RuntimeDirectory=pollwarden
RuntimeDirectoryMode=0755
LoadCredential=secrets:/etc/pollwarden/secrets
# Or, instead of LoadCredential= and --secrets: EnvironmentFile=/etc/pollwarden/secrets (root, mode 0600)
ExecStart={command}
Restart=on-failure
UMask=0077
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectControlGroups=yes
RestrictSUIDSGID=yes
LockPersonality=yes

[Install]
WantedBy=multi-user.target
"""

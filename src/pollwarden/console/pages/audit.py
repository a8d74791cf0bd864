"""The audit page: the same verification as `pollwarden audit verify`, and its problems if any."""

from __future__ import annotations

from ...home.operating import AuditCheck
from .frame import Chrome, dash, esc, layout


def audit_page(
    check: AuditCheck | None,
    problem: str | None,
    *,
    chrome: Chrome,
) -> str:
    parts = ["<h1>Audit log</h1>"]
    if check is None:
        parts.append(f'<p class="verdict bad">Cannot verify</p><p>{esc(problem or "")}</p>')
    else:
        report = check.report
        verdict = '<p class="verdict ok">intact</p>' if report.ok else '<p class="verdict bad">TAMPERED</p>'
        against = (
            f"checked against the checkpoint kept elsewhere, {esc(check.trusted)}"
            if check.trusted
            else "no checkpoint kept elsewhere, so a rollback of the whole database could not be checked"
        )
        parts.append(
            f'{verdict}<p><span class="mono">{esc(check.source)}</span>: {report.records} records in'
            f" {report.logs} logs, {report.checkpoints} signed checkpoints, {report.bytes_verified} bytes"
            f" verified; {against}.</p>"
            '<p class="muted">The same check as <code>pollwarden audit verify</code>: the hash chain over the'
            " encrypted records and the signed checkpoints; it needs no decryption key.</p>"
        )
        if report.problems:
            rows = "".join(
                f'<tr><td class="mono">{esc(p.log_id)}</td><td class="num">{dash(p.seq)}</td>'
                f"<td>{esc(p.what)}</td></tr>"
                for p in report.problems
            )
            parts.append(
                "<h2>Problems</h2><table><thead><tr><th>Log</th><th>Record</th><th>What</th></tr></thead>"
                f"<tbody>{rows}</tbody></table>"
            )
    return layout(
        "Audit",
        "".join(parts),
        here="audit",
        chrome=chrome,
    )

"""The console's pages: plain functions from data to HTML, every value escaped where it is written.

Nothing here reads the store or the request; `views.py` gathers the data and passes it in. There is no
script: every form works as an HTML form, and the Content-Security-Policy the server sends forbids scripts.
"""

from .approvals import approvals_page
from .audit import audit_page
from .decisions import DECISIONS_PAGE, DecisionsData, confirm_cancel_page, confirm_close_page, decisions_page
from .frame import Chrome, Flash, login_page, message_page
from .listing import FILTERS, ListData, ListView, operations_page
from .operations import OperationView, Row, operation_page
from .schedules import schedules_page

__all__ = [
    "DECISIONS_PAGE",
    "FILTERS",
    "Chrome",
    "DecisionsData",
    "Flash",
    "ListData",
    "ListView",
    "OperationView",
    "Row",
    "approvals_page",
    "audit_page",
    "confirm_cancel_page",
    "confirm_close_page",
    "decisions_page",
    "login_page",
    "message_page",
    "operation_page",
    "operations_page",
    "schedules_page",
]

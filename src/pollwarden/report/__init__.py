"""What a waiter or an operator is told: progress, the audit story, why, a decision's follow-up, ownership."""

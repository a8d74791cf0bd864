"""Actions beside polling, each recorded: submit, cancel and fetch at the provider, a person's decision applied."""

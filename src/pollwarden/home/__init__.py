"""A home: where state lives and who may read it, the store shared per home, what an operator does to one."""

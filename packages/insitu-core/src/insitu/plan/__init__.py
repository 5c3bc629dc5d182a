"""Which samples, in what order, and what each block needs: splits, epoch order, the read
plan, the memory model and the budget."""

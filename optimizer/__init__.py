"""Training strategies (DisTrO and baselines) behind one interface. No networking here."""

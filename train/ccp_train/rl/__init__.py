"""Code every learned algorithm's trainer shares: seeding and what determinism depends on
(:mod:`.determinism`), training curves as CSV and PNG (:mod:`.curves`)."""

"""corral's pure core: statuses, actors, text intake, violations, records. No I/O."""

"""corral's pure core, no I/O: statuses and the transition and operations tables, actors, records,
violations and the park rule, failure classes and the retry policy, the settings schema, prompts,
wording, sanitizing and masking, substates, refs and the clock."""

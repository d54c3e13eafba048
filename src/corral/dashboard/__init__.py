"""The web dashboard the daemon serves on loopback: the board, each task, and what a person does
(docs/dashboard.md). A surface: it renders what the engine returns and calls the operations the CLI
calls."""

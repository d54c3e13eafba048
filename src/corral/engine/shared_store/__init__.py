"""The shared store's room: a team's hosts over one PostgreSQL store (docs/workers.md).

Everything the shared placement does lives here (its turn queue, the leases and their sweep, the turns a
host runs on its own, a worker's claimed turns, the task branches through the remote, the files and
transcripts shipped between hosts, copying a history between the stores), and the rest of the engine
reaches it only through ``project.placement`` (:mod:`corral.engine.placement`).
"""

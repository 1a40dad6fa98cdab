"""The town database: schema, contexts, runs, state, the outbox and its logs, the migration, the export."""

"""From receivers to entities: polling, handlers, groups, the context."""

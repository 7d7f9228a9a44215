"""When the feed rebuild and the digest sends run: ``plan`` decides what a start does with the
stored jobs (pure), ``scheduler`` runs them with APScheduler."""

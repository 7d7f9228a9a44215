"""``syndicate doctor``: the setup around the program checked before a send lands in spam or
its bounces get lost: DNS records (``records``), the relay (``relay``), a sample message
(``message``), the reader list (``readers``); ``report`` holds the verdicts, ``preflight`` the
checks ``send`` runs first."""

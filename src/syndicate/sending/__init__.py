"""Sending, in stages: issuing (select, render, store), messages, the send loop, transports,
dispatch; the engine handed in where the program is put together (``engine``); the
scale-out (``scale``), which imports the others and is imported by none of them."""

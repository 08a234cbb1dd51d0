"""Runtime helpers of a drumbeat process: which malloc it runs on (``allocator``), how its
garbage collector is tuned (``gctune``), how a loop shares its time between jobs (``pace``),
how its long turns are recorded (``stalls``) and what ends its waits (``wake``). They know
nothing of crawling."""

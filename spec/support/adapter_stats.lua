-- The keys every adapter's stats() has, for the same things (README, "The adapters' stats"):
-- vmpool.luv.stats(), vmpool.cqueues.stats(), vmpool.ngx.stats(). Each adds keys of its own.
return {
  "in_flight", -- calls and futures waited for, not yet dispatched
  "waiting", -- coroutines (requests) waiting
  "queued", -- finished calls whose completion the next wake-up takes
  "held", -- calls filed under a token, not yet taken
  "deferred", -- calls of an open batch, not yet handed to the pool
  "waits", -- waits for a call (counter)
  "resumes", -- waiters woken because their call finished
  "early", -- waiting coroutines resumed by other code
  "wakeups", -- wake-ups of the loop's dispatcher
  "empty", -- of those, wake-ups that found nothing finished
  "completions", -- tokens taken
  "dropped", -- completions whose waiter had stopped waiting
  "batched", -- calls handed to the pool as part of a batch
}

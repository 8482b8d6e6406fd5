package regions

// Backoff is backoff, for the test that pins the fault model's copy.
const Backoff = backoff

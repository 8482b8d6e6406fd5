package middleware

// needsRelease reports whether c holds slots of in-flight windows, which
// the step after the handler frees.
func (l *limiter) needsRelease(c *call) bool { return l.releaser != nil && c.p.Slots }

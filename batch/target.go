package batch

// Result is what a [FetchFunc] returns for one target.
type Result struct {
	// Content is the fetched (and possibly transformed) text.
	Content string
	// Meta is everything else the host wants to return with the content. It
	// must be JSON-encodable; a "content" key in it is overwritten by Content.
	Meta map[string]any
}

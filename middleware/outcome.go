package middleware

import (
	"bufio"
	"io"
	"net"
	"net/http"
)

// statusWriter records the status a handler answers with. It keeps the
// optional interfaces of the ResponseWriter it wraps working: Flush,
// Hijack and ReadFrom pass through, and Unwrap lets
// http.ResponseController reach the rest (deadlines, full duplex).
type statusWriter struct {
	http.ResponseWriter
	status   int // the final status written; 0 until then
	hijacked bool
	written  int64 // bytes of body the wrapped writer accepted (Settlement.Written)
}

var (
	_ http.Flusher  = (*statusWriter)(nil)
	_ http.Hijacker = (*statusWriter)(nil)
	_ io.ReaderFrom = (*statusWriter)(nil)
)

func (w *statusWriter) WriteHeader(code int) {
	// 1xx responses other than 101 are informational: the final status
	// follows.
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.written += int64(n)
	return n, err
}

// ReadFrom keeps the wrapped writer's io.ReaderFrom (sendfile for an
// *os.File) in use.
func (w *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	var n int64
	var err error
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(src)
	} else {
		n, err = io.Copy(writerOnly{w.ResponseWriter}, src)
	}
	w.written += n
	return n, err
}

// Flush flushes the wrapped writer, when it can; like net/http's own
// writer, flushing sends the headers with status 200 if none was written.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack hands the connection to the handler, when the wrapped writer can.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked = true
	}
	return conn, rw, err
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writerOnly hides every method but Write, so that io.Copy cannot call
// ReadFrom back.
type writerOnly struct{ io.Writer }

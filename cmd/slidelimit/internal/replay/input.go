package replay

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"container/heap"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
)

// Input is one log to replay: Name is a path, or "-" for standard input.
type Input struct {
	Name string
	// R, when not nil, is read instead of opening Name (tests, stdin).
	R io.Reader
}

// counter counts the bytes read from an input's file, compressed or not,
// for the progress line.
type counter struct {
	r io.Reader
	n *atomic.Int64
}

func (c counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// source reads the records of one input in its own order.
type source struct {
	name   string
	file   int
	closer io.Closer
	br     *bufio.Reader
	buf    []byte // the line being read, when it spans the reader's buffer
	format Format
	fields *Fields
	line   int
	from   int64 // the earliest time replayed (minTime, or minScriptTime for the script)
	bad    *badLines
	lines  *int64 // lines read, every input together
}

// open opens in (gzip when its name ends in .gz or its bytes say so),
// counting the bytes read in read.
func open(in Input, file int, read *atomic.Int64) (*source, error) {
	var r io.Reader = in.R
	var closer io.Closer
	if r == nil {
		if in.Name == "-" {
			r = os.Stdin
		} else {
			f, err := os.Open(in.Name)
			if err != nil {
				return nil, fmt.Errorf("replay: %w", err)
			}
			r, closer = f, f
		}
	}
	br := bufio.NewReaderSize(counter{r, read}, 1<<16)
	magic, _ := br.Peek(2)
	if strings.HasSuffix(in.Name, ".gz") || bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		z, err := gzip.NewReader(br)
		if err != nil {
			if closer != nil {
				closer.Close()
			}
			return nil, fmt.Errorf("replay: %s: %w", in.Name, err)
		}
		br = bufio.NewReaderSize(z, 1<<16)
	}
	name := in.Name
	if name == "-" {
		name = "stdin"
	}
	return &source{name: name, file: file, closer: closer, br: br}, nil
}

// MaxLine is the longest line read, newline excluded: a longer one is a
// bad line, skipped without being held in memory.
const MaxLine = 1 << 20

var errLong = fmt.Errorf("%w: longer than %d bytes", errLine, MaxLine)

// readLine returns the next line without its line ending ("\n" or
// "\r\n"), valid until the next call; long reports a line over MaxLine,
// whose bytes were skipped, not held. It returns io.EOF after the last
// line.
func (s *source) readLine() ([]byte, bool, error) {
	s.buf = s.buf[:0]
	var line []byte
	n := 0 // bytes of the line read so far
	for {
		frag, err := s.br.ReadSlice('\n')
		if err == nil && n == 0 {
			line = frag // the whole line is in the reader's buffer: no copy
		} else {
			if n+len(frag) <= MaxLine+2 {
				s.buf = append(s.buf, frag...)
			}
			line = s.buf
		}
		n += len(frag)
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && n == 0:
			return nil, false, io.EOF
		case err != nil && err != io.EOF:
			return nil, false, err
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if n > MaxLine+2 || len(line) > MaxLine {
			return nil, true, nil
		}
		return line, false, nil
	}
}

// next reads the next parseable record into r; it returns false at the
// end of the input. Unparseable lines are counted in s.bad.
func (s *source) next(r *Record) (bool, error) {
	for {
		b, long, err := s.readLine()
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("replay: %s: line %d: %w", s.name, s.line+1, err)
		}
		s.line++
		*s.lines++
		if long {
			s.bad.add(s.name, s.line, errLong)
			continue
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		if s.format == 0 {
			s.format = detect(b)
		}
		*r = Record{}
		if s.format == JSONLines {
			err = parseJSON(b, s.fields, r)
		} else {
			err = parseCLF(b, r)
		}
		if err == nil && r.Time < s.from {
			err = errEarly
		}
		if err != nil {
			s.bad.add(s.name, s.line, err)
			continue
		}
		r.File, r.Line = s.file, s.line
		r.size = int64(len(b)) + recordOverhead
		return true, nil
	}
}

func (s *source) close() {
	if s.closer != nil {
		s.closer.Close()
	}
}

// badLines counts unparseable lines and keeps the first few.
type badLines struct {
	n     int64
	first []string // "name:line: error"
}

// maxBadShown is how many bad lines a report names.
const maxBadShown = 5

func (b *badLines) add(name string, line int, err error) {
	b.n++
	if len(b.first) < maxBadShown {
		b.first = append(b.first, Printable(fmt.Sprintf("%s:%d: %v", name, line, err)))
	}
}

// recHeap orders records by time, then input, then line: file order for
// equal times.
// Records are held by pointer: swapping them by value cost an eighth of
// a replay.
type recHeap []*Record

func (h recHeap) Len() int           { return len(h) }
func (h recHeap) Less(i, j int) bool { return less(h[i], h[j]) }
func (h recHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *recHeap) Push(x any)        { *h = append(*h, x.(*Record)) }
func (h *recHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return r
}

// MaxReorder bounds the reorder buffers of a replay, every input
// together: the bytes of the lines they hold, plus recordOverhead a line.
// When they hold more, the earliest line leaves before its horizon is
// read, so that memory is bounded whatever the times (a busy log, or
// millions of lines of one second); a line that then comes behind it is
// late.
const MaxReorder = 64 << 20

// recordOverhead is what a held record costs besides its line: the Record,
// its pointer in the heap, and the rounding of its allocations.
const recordOverhead = 200

// sorted puts the records of one input in time order through a bounded
// reorder buffer: a record leaves once a record at least horizon later has
// been read, when the buffers of every input hold more than budget, or at
// the end of the input. A record earlier than one already handed out is
// late: counted, reported and not replayed. Memory holds the records of
// one horizon, at most budget.
type sorted struct {
	src     *source
	done    bool
	h       recHeap
	maxSeen int64 // newest time read
	horizon int64 // µs
	last    int64 // time of the last record handed out
	late    *badLines
	held    *int64 // bytes the buffers of every input hold (Record.size)
	budget  int64  // how many they may hold: MaxReorder
}

// peek returns the input's next record in time order, or nil at its end.
func (s *sorted) peek() (*Record, error) {
	for !s.done && (len(s.h) == 0 || s.h[0].Time > s.maxSeen-s.horizon && *s.held <= s.budget) {
		r := new(Record)
		ok, err := s.src.next(r)
		if err != nil {
			return nil, err
		}
		if !ok {
			s.done = true
			break
		}
		if r.Time < s.last {
			// Within the horizon of the newest line, it came behind a
			// line that left because the buffers were full.
			err := errLate
			if r.Time >= s.maxSeen-s.horizon {
				err = errLateFull
			}
			s.late.add(s.src.name, r.Line, err)
			continue
		}
		s.maxSeen = max(s.maxSeen, r.Time)
		*s.held += r.size
		heap.Push(&s.h, r)
	}
	if len(s.h) == 0 {
		return nil, nil
	}
	return s.h[0], nil
}

func (s *sorted) pop() Record {
	r := heap.Pop(&s.h).(*Record)
	s.last = r.Time
	*s.held -= r.size
	return *r
}

var (
	errLate     = errors.New("more than the reorder horizon behind a later line of its file; not replayed (raise -reorder)")
	errLateFull = fmt.Errorf("behind a later line of its file by more than the reorder buffers hold (%d MiB of lines); not replayed", MaxReorder>>20)
)

// merger merges the time-ordered streams of several inputs, so that logs
// of several servers covering the same hours replay interleaved and
// rotated logs replay in time order whatever order they are given in.
// Equal times keep the inputs' order, then the lines'.
type merger struct {
	ins []*sorted
}

// next returns the next record of every input in time order; false at
// the end.
func (m *merger) next(r *Record) (bool, error) {
	var best *Record
	bi := -1
	for i, in := range m.ins {
		h, err := in.peek()
		if err != nil {
			return false, err
		}
		if h != nil && (best == nil || less(h, best)) {
			best, bi = h, i
		}
	}
	if bi < 0 {
		return false, nil
	}
	*r = m.ins[bi].pop()
	return true, nil
}

func less(a, b *Record) bool {
	if a.Time != b.Time {
		return a.Time < b.Time
	}
	if a.File != b.File {
		return a.File < b.File
	}
	return a.Line < b.Line
}

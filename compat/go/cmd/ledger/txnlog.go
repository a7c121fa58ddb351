package main

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// quietLogger is the producers' client log (info level) with repeats held back:
// a message logged more than repeatsMax times in one second is dropped for the
// rest of that second and counted in a line when the second is over. franz-go
// retries a transaction's AddPartitionsToTxn against a dead coordinator without
// pause, thousands of times a second, which would otherwise fill the log by
// hundreds of megabytes a run.
type quietLogger struct {
	mu      sync.Mutex
	w       io.Writer
	second  int64
	counts  map[string]int
	dropped map[string]int
}

const repeatsMax = 20

func newQuietLogger(w io.Writer) *quietLogger {
	return &quietLogger{w: w, counts: map[string]int{}, dropped: map[string]int{}}
}

func (l *quietLogger) Level() kgo.LogLevel { return kgo.LogLevelInfo }

// log writes one line: time, prefix, level, message and key-value pairs.
func (l *quietLogger) log(prefix string, level kgo.LogLevel, msg string, keyvals ...any) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := now.Unix(); s != l.second {
		l.flushLocked(now)
		l.second = s
	}
	l.counts[msg]++
	if l.counts[msg] > repeatsMax {
		l.dropped[msg]++
		return
	}
	line := fmt.Sprintf("%s %s[%s] %s", now.Format(timeFormat), prefix, level, msg)
	for i := 0; i+1 < len(keyvals); i += 2 {
		line += fmt.Sprintf("; %v: %v", keyvals[i], keyvals[i+1])
	}
	fmt.Fprintln(l.w, line)
}

// flush writes the counts of what the current second held back.
func (l *quietLogger) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked(time.Now())
}

func (l *quietLogger) flushLocked(now time.Time) {
	for m, n := range l.dropped {
		fmt.Fprintf(l.w, "%s [quiet] %d more of %q held back in the second before\n", now.Format(timeFormat), n, m)
	}
	l.counts, l.dropped = map[string]int{}, map[string]int{}
}

// prefixed is the kgo.Logger of one client, sharing the log and its limits.
type prefixed struct {
	l      *quietLogger
	prefix string
}

func (p prefixed) Level() kgo.LogLevel { return p.l.Level() }

func (p prefixed) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	p.l.log(p.prefix, level, msg, keyvals...)
}

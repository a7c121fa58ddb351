// Command kgoresults turns `go test -json` output of franz-go's kgo suite into
// a per-test results TSV, and results TSVs into a markdown comparison table.
//
//	kgoresults parse -in go-test.json -out results-keel.tsv
//	kgoresults report [-allowlist allowlist.txt] results-keel.tsv results-kafka.tsv
//
// parse prints every skipped test with its reason and every failed test with
// its first failure line, then the line
// "franz-go: N passed, N failed, N skipped". It exits 1 if a test failed,
// if no test ran, or if the test binary did not build.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	code := 0
	switch os.Args[1] {
	case "parse":
		code, err = parseCmd(os.Args[2:])
	case "report":
		err = reportCmd(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kgoresults:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kgoresults parse -in FILE -out FILE | kgoresults report [-allowlist FILE] RESULTS.tsv...")
	os.Exit(2)
}

// event is one line of `go test -json` (cmd/test2json) output.
type event struct {
	Action     string
	Package    string
	ImportPath string
	Test       string
	Elapsed    float64
	Output     string
}

type testState struct {
	name     string
	order    int
	result   string // pass, fail, skip, or "" while running
	elapsed  float64
	outputs  []string            // output lines of this test and all of its subtests, in order
	subSkips []string            // "sub: reason" for skipped subtests
	subFails []string            // names of failed subtests
	subOut   map[string][]string // output lines per subtest
	subMax   float64             // longest elapsed time of a subtest
}

// Result is one row of a results TSV.
type Result struct {
	Test    string
	Result  string
	Seconds float64
	Detail  string
}

var (
	// A t.Log/t.Error/t.Skip line as printed by the testing package.
	msgLine = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: (.*)$`)
	// Log lines of the kgo test helpers that are not failures.
	logNoise = regexp.MustCompile(`^(unable to delete |deleting (topic|group) |FAILED TESTING|writes (succeeded|failed):|redelivered |phase \d|level \d|got expected error|pre-KIP-1251)|completed in |unique keys`)
)

func parseCmd(args []string) (int, error) {
	fs := flag.NewFlagSet("parse", flag.ExitOnError)
	in := fs.String("in", "-", "go test -json output ('-' for stdin)")
	out := fs.String("out", "", "results TSV to write")
	fs.Parse(args)
	if *out == "" {
		return 2, errors.New("parse: -out is required")
	}

	var r io.Reader = os.Stdin
	if *in != "-" {
		f, err := os.Open(*in)
		if err != nil {
			return 2, err
		}
		defer f.Close()
		r = f
	}

	tests := make(map[string]*testState)
	var (
		pkgOutput   []string
		buildOutput []string
		buildFailed bool
		pkgResult   string
	)
	get := func(name string) *testState {
		st, ok := tests[name]
		if !ok {
			st = &testState{name: name, order: len(tests), subOut: make(map[string][]string)}
			tests[name] = st
		}
		return st
	}

	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil || ev.Action == "" {
			// go test prints build errors and other text outside
			// of the JSON stream; keep it for diagnosis.
			buildOutput = append(buildOutput, string(line))
			continue
		}
		switch ev.Action {
		case "build-output":
			buildOutput = append(buildOutput, strings.TrimRight(ev.Output, "\n"))
			continue
		case "build-fail":
			buildFailed = true
			continue
		}
		if ev.Test == "" {
			switch ev.Action {
			case "output":
				pkgOutput = append(pkgOutput, strings.TrimRight(ev.Output, "\n"))
			case "pass", "fail", "skip":
				pkgResult = ev.Action
			}
			continue
		}
		top, sub, isSub := strings.Cut(ev.Test, "/")
		st := get(top)
		switch ev.Action {
		case "output":
			o := strings.TrimRight(ev.Output, "\n")
			st.outputs = append(st.outputs, o)
			if isSub {
				st.subOut[sub] = append(st.subOut[sub], o)
			}
		case "pass", "fail", "skip":
			if !isSub {
				st.result = ev.Action
				st.elapsed = ev.Elapsed
				continue
			}
			if ev.Elapsed > st.subMax {
				st.subMax = ev.Elapsed
			}
			switch ev.Action {
			case "skip":
				st.subSkips = append(st.subSkips, sub+": "+skipReason(st.subOut[sub]))
			case "fail":
				st.subFails = append(st.subFails, sub)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 2, err
	}

	panicLine := firstMatching(pkgOutput, func(s string) bool {
		return strings.HasPrefix(s, "panic: ") || strings.HasPrefix(s, "fatal error: ")
	})

	var results []Result
	ordered := make([]*testState, 0, len(tests))
	for _, st := range tests {
		ordered = append(ordered, st)
	}
	sort.Slice(ordered, func(i, j int) bool { return ordered[i].order < ordered[j].order })
	for _, st := range ordered {
		// A test's own elapsed time excludes its parallel subtests,
		// which run after the test function returns.
		res := Result{Test: st.name, Result: st.result, Seconds: max(st.elapsed, st.subMax)}
		switch st.result {
		case "skip":
			res.Detail = skipReason(st.outputs)
		case "fail":
			res.Detail = failReason(st)
		case "pass":
			if len(st.subSkips) > 0 {
				res.Detail = "skipped subtests: " + strings.Join(st.subSkips, "; ")
			}
		default:
			// Started but never finished: the binary panicked or hit
			// the -timeout. Both fail the test.
			res.Result = "fail"
			reason := panicLine
			if reason == "" {
				reason = firstMatching(st.outputs, func(s string) bool { return strings.HasPrefix(s, "panic: ") })
			}
			if reason == "" {
				reason = "did not finish"
			}
			res.Detail = "did not finish: " + reason
		}
		res.Detail = clean(res.Detail)
		results = append(results, res)
	}

	if err := writeTSV(*out, results); err != nil {
		return 2, err
	}

	var pass, fail, skip int
	for _, res := range results {
		switch res.Result {
		case "pass":
			pass++
			if res.Detail != "" {
				fmt.Printf("PASS %s (%s)\n", res.Test, res.Detail)
			}
		case "fail":
			fail++
			fmt.Printf("FAIL %s (%.2fs): %s\n", res.Test, res.Seconds, res.Detail)
		case "skip":
			skip++
			fmt.Printf("SKIP %s: %s\n", res.Test, res.Detail)
		}
	}

	code := 0
	if buildFailed || (len(results) == 0 && pkgResult != "pass") {
		fmt.Println("the kgo test binary did not build or run:")
		for _, l := range tail(append(buildOutput, pkgOutput...), 40) {
			fmt.Println("  " + l)
		}
		code = 1
	}
	if len(results) == 0 {
		fmt.Println("no test ran")
		code = 1
	}
	if pkgResult == "fail" && fail == 0 && !buildFailed {
		// A failure outside any test (e.g. TestMain or init).
		fmt.Println("package failed outside of a test:")
		for _, l := range tail(pkgOutput, 20) {
			fmt.Println("  " + l)
		}
		code = 1
	}
	fmt.Printf("franz-go: %d passed, %d failed, %d skipped\n", pass, fail, skip)
	if fail > 0 {
		code = 1
	}
	return code, nil
}

// skipReason is the last message the test printed before it was skipped.
func skipReason(lines []string) string {
	reason := ""
	fallback := ""
	for _, l := range lines {
		if strings.HasPrefix(l, "--- SKIP") {
			break
		}
		if m := msgLine.FindStringSubmatch(l); m != nil {
			fallback = m[1]
			if !logNoise.MatchString(m[1]) {
				reason = m[1]
			}
		}
	}
	if reason == "" {
		reason = fallback
	}
	if reason == "" {
		return "skipped without a message"
	}
	return reason
}

// failReason is the first failure message of the test, preferring the
// messages of its first failed subtest.
func failReason(st *testState) string {
	lines := st.outputs
	prefix := ""
	if len(st.subFails) > 0 {
		// The deepest recorded name is most specific; subOut is keyed
		// by everything after the top-level name.
		sub := st.subFails[0]
		lines = st.subOut[sub]
		prefix = sub + ": "
	}
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "panic: ") {
			return prefix + strings.TrimSpace(l)
		}
		m := msgLine.FindStringSubmatch(l)
		if m == nil || logNoise.MatchString(m[1]) {
			continue
		}
		return prefix + m[1]
	}
	// Fall back to the whole test's output.
	for _, l := range st.outputs {
		m := msgLine.FindStringSubmatch(l)
		if m != nil && !logNoise.MatchString(m[1]) {
			return m[1]
		}
	}
	return "failed without a message"
}

func firstMatching(lines []string, f func(string) bool) string {
	for _, l := range lines {
		if f(strings.TrimSpace(l)) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

func tail(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}

// clean makes s fit in one TSV cell.
func clean(s string) string {
	s = strings.Map(func(r rune) rune {
		switch r {
		case '\t', '\n', '\r':
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = s[:297] + "..."
	}
	return s
}

const tsvHeader = "test\tresult\tseconds\tdetail"

func writeTSV(path string, results []Result) error {
	var b strings.Builder
	b.WriteString(tsvHeader + "\n")
	for _, r := range results {
		fmt.Fprintf(&b, "%s\t%s\t%.2f\t%s\n", r.Test, r.Result, r.Seconds, r.Detail)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func readTSV(path string) (map[string]Result, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Result)
	for i, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if line == "" || (i == 0 && line == tsvHeader) {
			continue
		}
		f := strings.SplitN(line, "\t", 4)
		if len(f) < 3 {
			return nil, fmt.Errorf("%s:%d: expected at least 3 tab-separated fields", path, i+1)
		}
		secs, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: bad seconds %q", path, i+1, f[2])
		}
		r := Result{Test: f[0], Result: f[1], Seconds: secs}
		if len(f) == 4 {
			r.Detail = f[3]
		}
		out[r.Test] = r
	}
	return out, nil
}

// readAllowlist returns the allowlisted tests and notes: the trailing comment
// of an allowlisted test, or the reason of a comment line of the form
// "# TestName: reason" for a test left out.
func readAllowlist(path string) (allowed map[string]bool, notes map[string]string, err error) {
	allowed = make(map[string]bool)
	notes = make(map[string]string)
	if path == "" {
		return allowed, notes, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	commented := regexp.MustCompile(`^#\s*((?:Test|Fuzz)\w*):\s*(.+)$`)
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if m := commented.FindStringSubmatch(line); m != nil {
			notes[m[1]] = strings.TrimSpace(m[2])
			continue
		}
		comment := ""
		if i := strings.IndexByte(line, '#'); i >= 0 {
			comment = strings.TrimSpace(line[i+1:])
			line = strings.TrimSpace(line[:i])
		}
		if line != "" {
			allowed[line] = true
			if comment != "" {
				notes[line] = comment
			}
		}
	}
	return allowed, notes, nil
}

func columnName(path string) string {
	label := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "results-"), ".tsv")
	switch label {
	case "keel":
		return "Keel"
	case "kafka":
		return "Apache Kafka"
	}
	return label
}

func reportCmd(args []string) error {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	allowPath := fs.String("allowlist", "", "allowlist file whose '# TestName: reason' comments become notes")
	brokerOnly := fs.Bool("broker-only", false, "fold tests that the allowlist marks as client-side unit tests into one summary row")
	fs.Parse(args)
	files := fs.Args()
	if len(files) == 0 {
		return errors.New("report: no results files given")
	}

	allowed, allowNotes, err := readAllowlist(*allowPath)
	if err != nil {
		return err
	}

	type column struct {
		name    string
		present bool
		results map[string]Result
	}
	var cols []column
	names := make(map[string]bool)
	for _, f := range files {
		c := column{name: columnName(f)}
		if res, err := readTSV(f); err == nil {
			c.present = true
			c.results = res
			for n := range res {
				names[n] = true
			}
		} else if !os.IsNotExist(err) {
			return err
		}
		cols = append(cols, c)
	}
	for n := range allowed {
		names[n] = true
	}
	isUnit := func(n string) bool {
		note := allowNotes[n]
		return !allowed[n] && (strings.HasPrefix(note, "client-side unit test") || strings.HasPrefix(note, "fuzz target"))
	}
	// Allowlisted tests first, then the other broker tests, then the
	// client-side unit tests; alphabetical within each.
	rank := func(n string) int {
		switch {
		case allowed[n]:
			return 0
		case isUnit(n):
			return 2
		}
		return 1
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Slice(sorted, func(i, j int) bool {
		ri, rj := rank(sorted[i]), rank(sorted[j])
		if ri != rj {
			return ri < rj
		}
		return sorted[i] < sorted[j]
	})

	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

	var b strings.Builder
	b.WriteString("| test |")
	for _, c := range cols {
		b.WriteString(" " + c.name + " |")
	}
	b.WriteString(" notes |\n|---|")
	for range cols {
		b.WriteString("---|")
	}
	b.WriteString("---|\n")

	counts := make([]map[string]int, len(cols))
	for i := range counts {
		counts[i] = make(map[string]int)
	}
	var folded []string
	for _, n := range sorted {
		if *brokerOnly && isUnit(n) {
			folded = append(folded, n)
			continue
		}
		var notes []string
		switch note, ok := allowNotes[n]; {
		case allowed[n] && ok:
			notes = append(notes, "allowlisted: "+note)
		case allowed[n]:
			notes = append(notes, "allowlisted")
		case ok:
			notes = append(notes, note)
		}
		b.WriteString("| " + n + " |")
		for i, c := range cols {
			r, ok := c.results[n]
			cell := "not run"
			if ok {
				cell = r.Result
				counts[i][r.Result]++
				if r.Result == "fail" {
					cell = "**fail**"
				}
				if r.Detail != "" && (r.Result != "pass" || !strings.HasPrefix(r.Detail, "skipped subtests")) {
					notes = append(notes, c.name+": "+r.Detail)
				} else if r.Detail != "" {
					notes = append(notes, c.name+" "+r.Detail)
				}
			} else if !c.present {
				cell = "—"
			}
			b.WriteString(" " + cell + " |")
		}
		b.WriteString(" " + esc(strings.Join(notes, "; ")) + " |\n")
	}
	if len(folded) > 0 {
		fmt.Fprintf(&b, "| %d client-side unit tests |", len(folded))
		for i, c := range cols {
			if !c.present {
				b.WriteString(" — |")
				continue
			}
			var p, f, s, nr int
			for _, n := range folded {
				r, ok := c.results[n]
				switch {
				case !ok:
					nr++
				case r.Result == "pass":
					p++
				case r.Result == "fail":
					f++
				default:
					s++
				}
				if ok {
					counts[i][r.Result]++
				}
			}
			fmt.Fprintf(&b, " %d pass, %d fail, %d skip", p, f, s)
			if nr > 0 {
				fmt.Fprintf(&b, ", %d not run", nr)
			}
			b.WriteString(" |")
		}
		b.WriteString(" no broker traffic; listed in allowlist.txt |\n")
	}
	b.WriteString("| **total** |")
	for i, c := range cols {
		if !c.present {
			b.WriteString(" — |")
			continue
		}
		fmt.Fprintf(&b, " %d passed, %d failed, %d skipped |", counts[i]["pass"], counts[i]["fail"], counts[i]["skip"])
	}
	b.WriteString(" |\n")
	fmt.Print(b.String())
	return nil
}

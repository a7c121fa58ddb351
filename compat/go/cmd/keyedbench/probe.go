package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// fsyncEvent fires for every fsync and fdatasync of an ext4 file, whatever the path
// (syscall or io_uring); syncfsEvent with wait == 1 once for every syncfs or sync of
// an ext4 file system (Keel's checkpoints sync many segment files with one syncfs).
// fsyncs_per_s counts both.
const (
	fsyncEvent  = "ext4:ext4_sync_file_enter"
	syncfsEvent = "ext4:ext4_sync_fs"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's utime and stime (100 on Linux).
const clockTicks = 100

// usage is what the broker process did over the measured window.
type usage struct {
	Cores                   float64  `json:"cpu_cores"`
	PeakRSSMB               int64    `json:"peak_rss_mb"`
	DiskBytesPerPayloadByte float64  `json:"disk_bytes_per_payload_byte"`
	FsyncsPerSecond         *float64 `json:"fsyncs_per_s"`
	FsyncNote               string   `json:"fsync_note,omitempty"`
	// Keel's flush passes per second on each shard (keel_flush_passes_total), with -metrics.
	PassesPerShard map[string]float64 `json:"passes_per_s_by_shard,omitempty"`
	writeBytes     int64
}

func (u *usage) fsyncText() string {
	if u.FsyncsPerSecond == nil {
		return "n/a (" + u.FsyncNote + ")"
	}
	return fmt.Sprintf("%.0f", *u.FsyncsPerSecond)
}

type probe struct {
	pid           int
	metrics       string
	passes        map[string]float64
	ticks, writes int64
	perf          *exec.Cmd
	perfOut       string
	note          string
}

func (p *probe) begin() {
	p.ticks, p.writes = p.cpuTicks(), p.writeBytes()
	p.passes = scrapePasses(p.metrics)
	if _, err := os.Stat("/sys/kernel/tracing/events/ext4/ext4_sync_file_enter"); err != nil {
		p.note = "no " + fsyncEvent + " tracepoint"
		return
	}
	p.perfOut = filepath.Join(os.TempDir(), fmt.Sprintf("keyedbench-perf-%d-%d.csv", p.pid, time.Now().UnixNano()))
	p.perf = exec.Command("perf", "stat", "-x,", "-e", fsyncEvent, "-e", syncfsEvent, "--filter", "wait == 1",
		"-p", strconv.Itoa(p.pid), "-o", p.perfOut)
	if err := p.perf.Start(); err != nil {
		p.note, p.perf = "perf not runnable: "+err.Error(), nil
	}
}

func (p *probe) end(window time.Duration) *usage {
	u := &usage{
		Cores:      float64(p.cpuTicks()-p.ticks) / clockTicks / window.Seconds(),
		PeakRSSMB:  p.status("VmHWM:") / 1024,
		writeBytes: p.writeBytes() - p.writes,
		FsyncNote:  p.note,
	}
	if p.passes != nil {
		u.PassesPerShard = map[string]float64{}
		for shard, n := range scrapePasses(p.metrics) {
			u.PassesPerShard[shard] = (n - p.passes[shard]) / window.Seconds()
		}
	}
	if p.perf != nil {
		_ = p.perf.Process.Signal(syscall.SIGINT)
		_ = p.perf.Wait()
		text, _ := os.ReadFile(p.perfOut)
		_ = os.Remove(p.perfOut)
		for _, line := range strings.Split(string(text), "\n") {
			fields := strings.Split(line, ",")
			if len(fields) > 2 && (strings.HasPrefix(fields[2], fsyncEvent) || strings.HasPrefix(fields[2], syncfsEvent)) {
				if n, err := strconv.ParseFloat(fields[0], 64); err == nil {
					per := n / window.Seconds()
					if u.FsyncsPerSecond != nil {
						per += *u.FsyncsPerSecond
					}
					u.FsyncsPerSecond = &per
				}
			}
		}
		if u.FsyncsPerSecond == nil {
			u.FsyncNote = "perf stat counted nothing: " + strings.TrimSpace(string(text))
		}
	}
	return u
}

func (p *probe) cpuTicks() int64 {
	text, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start at state, field 3.
	fields := strings.Fields(string(text[strings.LastIndexByte(string(text), ')')+1:]))
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return utime + stime
}

func (p *probe) writeBytes() int64 {
	return p.field(fmt.Sprintf("/proc/%d/io", p.pid), "write_bytes:")
}

func (p *probe) status(key string) int64 {
	return p.field(fmt.Sprintf("/proc/%d/status", p.pid), key)
}

func (p *probe) field(path, key string) int64 {
	text, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(line, key) {
			if f := strings.Fields(line[len(key):]); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// scrapePasses reads keel_flush_passes_total per shard from a Prometheus endpoint;
// nil without one or when it does not answer.
func scrapePasses(url string) map[string]float64 {
	if url == "" {
		return nil
	}
	resp, err := http.Get(url)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil
	}
	passes := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, `keel_flush_passes_total{shard="`)
		if !ok {
			continue
		}
		shard, value, ok := strings.Cut(rest, `"} `)
		if n, err := strconv.ParseFloat(strings.TrimSpace(value), 64); ok && err == nil {
			passes[shard] = n
		}
	}
	return passes
}

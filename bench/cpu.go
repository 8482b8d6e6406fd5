package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// cpuSample is a snapshot of CPU time: this process, the redis-server (as
// it reports in INFO cpu) and the whole machine (busy time of /proc/stat).
// Differences of two samples tell where the CPU went during a run, and how
// much other processes on the machine took.
type cpuSample struct {
	self, redis, machine time.Duration
	// nvcsw is this process's voluntary context switches: a thread that
	// blocks (a futex wait, an idle poll) and is woken again counts one,
	// so their difference over a run counts the client's wake-ups.
	nvcsw int64
	ok    bool
}

// userHZ is the unit of /proc/stat (USER_HZ, 100 on every Linux platform Go
// supports).
const userHZ = 100

func sampleCPU(ctx context.Context, rdb *redis.Client) cpuSample {
	var s cpuSample
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return s
	}
	s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	s.nvcsw = int64(ru.Nvcsw)
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return s
	}
	u, err1 := strconv.ParseFloat(infoField(info, "used_cpu_user"), 64)
	y, err2 := strconv.ParseFloat(infoField(info, "used_cpu_sys"), 64)
	if err1 != nil || err2 != nil {
		return s
	}
	s.redis = time.Duration((u + y) * float64(time.Second))
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return s
	}
	var ticks int64
	// user nice system idle iowait irq softirq steal: busy is all but
	// idle and iowait (guest time is already in user).
	for i, v := range f[1:9] {
		if i == 3 || i == 4 {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return s
		}
		ticks += n
	}
	s.machine = time.Duration(ticks) * time.Second / userHZ
	s.ok = true
	return s
}

// cmdStat is the INFO commandstats line of one command.
type cmdStat struct {
	Name  string
	Calls int64
	Usec  int64
}

// commandStats returns the commands of INFO commandstats, which on Redis 7
// also counts the commands scripts run (the script's own entry, evalsha,
// includes their time).
func commandStats(ctx context.Context, rdb *redis.Client) ([]cmdStat, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	var out []cmdStat
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		st := cmdStat{Name: name}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				st.Calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.Usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// waitQuiet waits, for at most max, until the other processes on the
// machine take less than quietCores of CPU over half a second. It returns
// the load of the last half second, in cores.
func waitQuiet(ctx context.Context, rdb *redis.Client, max time.Duration) float64 {
	const quietCores, window = 0.2, 500 * time.Millisecond
	deadline := time.Now().Add(max)
	for {
		c0 := sampleCPU(ctx, rdb)
		select {
		case <-time.After(window):
		case <-ctx.Done():
			return 0
		}
		c1 := sampleCPU(ctx, rdb)
		if !c0.ok || !c1.ok {
			return 0
		}
		other := (c1.machine - c0.machine) - (c1.self - c0.self) - (c1.redis - c0.redis)
		load := other.Seconds() / window.Seconds()
		if load < quietCores || time.Now().After(deadline) {
			return load
		}
	}
}

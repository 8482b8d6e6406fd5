package main

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// cpuNow is a snapshot of CPU time: this process (the limiters, the
// replicators and the proxies) and each region's redis-server, as it
// reports in INFO cpu. A failed read leaves 0.
type cpuNow struct {
	self    time.Duration
	servers []time.Duration
}

func (w *world) cpuNow(ctx context.Context) cpuNow {
	var s cpuNow
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, srv := range w.servers {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		info, _ := c.Info(ctx, "cpu").Result()
		c.Close()
		s.servers = append(s.servers, redisCPU(info))
	}
	return s
}

// redisCPU reads used_cpu_user + used_cpu_sys from an INFO cpu reply.
func redisCPU(info string) time.Duration {
	var total float64
	for _, f := range []string{"used_cpu_user:", "used_cpu_sys:"} {
		i := strings.Index(info, f)
		if i < 0 {
			return 0
		}
		v := info[i+len(f):]
		if j := strings.IndexAny(v, "\r\n"); j >= 0 {
			v = v[:j]
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0
		}
		total += x
	}
	return time.Duration(total * float64(time.Second))
}

// cpuSpent accumulates the CPU a mode's slices took: this process, the
// deciding region's server (local) and its peers' servers.
type cpuSpent struct {
	self, local, peers time.Duration
}

// add adds what was spent between a and b, region local deciding.
func (s *cpuSpent) add(a, b cpuNow, local int) {
	s.self += b.self - a.self
	for i := range min(len(a.servers), len(b.servers)) {
		d := b.servers[i] - a.servers[i]
		if i == local {
			s.local += d
		} else {
			s.peers += d
		}
	}
}

package benchutil

import (
	"fmt"
	"os"

	"github.com/prometheus/procfs"
)

// CPUSeconds is the CPU time (user + system) each kind of process on this
// machine has used so far, by command name (certhub, kube-apiserver, etcd,
// …); the bench's own process counts as "bench". Processes that exited are
// not counted, so take both readings while the ones measured run.
func CPUSeconds() (map[string]float64, error) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	self := os.Getpid()
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil {
			continue // exited meanwhile
		}
		name := st.Comm
		if p.PID == self {
			name = "bench"
		}
		out[name] += st.CPUTime()
	}
	return out, nil
}

// CPUDelta is after - before for the kinds named in kinds, per unit (e.g.
// per certificate) when per > 0.
func CPUDelta(before, after map[string]float64, per int, kinds ...string) map[string]float64 {
	out := map[string]float64{}
	for _, k := range kinds {
		d := after[k] - before[k]
		if per > 0 {
			d /= float64(per)
		}
		out[k] = d
	}
	return out
}

// RSSByCommand is the resident memory each kind of process on this machine
// holds, in MiB, by command name as CPUSeconds counts them, with the number
// of processes of each.
func RSSByCommand() (map[string]float64, map[string]int, error) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return nil, nil, err
	}
	rss, n := map[string]float64{}, map[string]int{}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil {
			continue // exited meanwhile
		}
		rss[st.Comm] += float64(st.ResidentMemory()) / (1 << 20)
		n[st.Comm]++
	}
	return rss, n, nil
}

// MemAvailableMiB is the machine's MemAvailable (/proc/meminfo), in MiB.
func MemAvailableMiB() (float64, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, err
	}
	mi, err := fs.Meminfo()
	if err != nil {
		return 0, err
	}
	if mi.MemAvailableBytes == nil {
		return 0, fmt.Errorf("/proc/meminfo has no MemAvailable")
	}
	return float64(*mi.MemAvailableBytes) / (1 << 20), nil
}

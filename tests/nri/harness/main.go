// Command nri-harness plays a container runtime for Tidal's NRI plugin tests: it embeds NRI's
// own runtime side (github.com/containerd/nri/pkg/adaptation, the code containerd embeds),
// listens on a socket, and executes JSON commands read one per line from stdin, answering each
// with one JSON line on stdout. Unsolicited container updates requested by plugins are answered
// (all succeed) and reported as {"event":"update_containers",...} lines.
//
// Commands ({"op": ...}):
//
//	start                  create and start the adaptation
//	stop                   stop it (NRI leaves external plugins' connections open: a runtime
//	                       restart is a new harness process, see dump/restore)
//	descriptor             NRI's api.proto as compiled into its Go code (serialized FileDescriptorProto)
//	dump / restore pods containers   the runtime's pods and containers, to carry them over a restart
//	wait_plugins n timeout_ms   wait until n plugins are registered and synchronized
//	run_pod pod            RunPodSandbox; the pod is remembered for Synchronize
//	create pod_id container     CreateContainer, then PostCreateContainer; the adjusted container is remembered
//	update container_id resources   UpdateContainer
//	stop_container container_id     StopContainer
//	stop_pod / remove_pod pod_id
//	bench n pod_id container       n CreateContainer calls; per-call durations in ns
//	exit
//
// Pods, containers and resources are NRI API messages in protojson.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/log"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
)

type command struct {
	Op          string            `json:"op"`
	N           int               `json:"n"`
	TimeoutMs   int               `json:"timeout_ms"`
	PodID       string            `json:"pod_id"`
	ContainerID string            `json:"container_id"`
	Pod         json.RawMessage   `json:"pod"`
	Container   json.RawMessage   `json:"container"`
	Resources   json.RawMessage   `json:"resources"`
	Pods        []json.RawMessage `json:"pods"`
	Containers  []json.RawMessage `json:"containers"`
}

type metrics struct {
	mu      sync.Mutex
	count   int
	changed chan struct{}
}

func (m *metrics) RecordPluginInvocation(string, string, error)                               {}
func (m *metrics) RecordPluginLatency(string, string, time.Duration)                          {}
func (m *metrics) RecordPluginAdjustments(string, string, *api.ContainerAdjustment, int, int) {}
func (m *metrics) UpdatePluginCount(count int) {
	m.mu.Lock()
	m.count = count
	m.mu.Unlock()
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

func (m *metrics) plugins() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.count
}

type harness struct {
	socket     string
	out        *json.Encoder
	outMu      sync.Mutex
	r          *adaptation.Adaptation
	m          *metrics
	pods       map[string]*api.PodSandbox
	containers map[string]*api.Container
	order      []string
	syncs      int
}

func (h *harness) emit(v any) {
	h.outMu.Lock()
	defer h.outMu.Unlock()
	if err := h.out.Encode(v); err != nil {
		fmt.Fprintln(os.Stderr, "harness: write:", err)
		os.Exit(2)
	}
}

func raw(m proto.Message) json.RawMessage {
	if m == nil {
		return json.RawMessage("null")
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return json.RawMessage(fmt.Sprintf("%q", err.Error()))
	}
	return b
}

func rawList[T proto.Message](items []T) []json.RawMessage {
	out := []json.RawMessage{}
	for _, item := range items {
		out = append(out, raw(item))
	}
	return out
}

func (h *harness) sync(ctx context.Context, cb adaptation.SyncCB) error {
	pods := []*api.PodSandbox{}
	for _, p := range h.pods {
		pods = append(pods, p)
	}
	ctrs := []*api.Container{}
	for _, id := range h.order {
		if c, ok := h.containers[id]; ok {
			ctrs = append(ctrs, c)
		}
	}
	updates, err := cb(ctx, pods, ctrs)
	if err != nil {
		return err
	}
	// The first call is the runtime's own start (pre-installed plugins: none here); later ones
	// synchronize a plugin that connected.
	h.syncs++
	h.emit(map[string]any{"event": "synchronize", "at_start": h.syncs == 1, "pods": len(pods),
		"containers": len(ctrs), "updates": rawList(updates)})
	return nil
}

func (h *harness) update(_ context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	h.emit(map[string]any{"event": "update_containers", "updates": rawList(updates)})
	return nil, nil
}

func (h *harness) start() error {
	h.m = &metrics{changed: make(chan struct{}, 1)}
	r, err := adaptation.New("nri-harness", "v0", h.sync, h.update,
		adaptation.WithSocketPath(h.socket),
		adaptation.WithPluginPath(os.DevNull+"-none"),
		adaptation.WithPluginConfigPath(os.DevNull+"-none"),
		adaptation.WithMetrics(h.m))
	if err != nil {
		return err
	}
	if err := r.Start(); err != nil {
		return err
	}
	h.r = r
	return nil
}

func (h *harness) waitPlugins(n int, timeout time.Duration) (int, error) {
	deadline := time.After(timeout)
	for {
		if got := h.m.plugins(); got >= n {
			return got, nil
		}
		select {
		case <-h.m.changed:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			return h.m.plugins(), fmt.Errorf("timed out waiting for %d plugins", n)
		}
	}
}

func unmarshal(b json.RawMessage, m proto.Message, what string) error {
	if len(b) == 0 {
		return fmt.Errorf("missing %s", what)
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func (h *harness) do(cmd command) (map[string]any, error) {
	ctx := context.Background()
	if cmd.Op != "start" && cmd.Op != "exit" && cmd.Op != "dump" && cmd.Op != "restore" && cmd.Op != "descriptor" && h.r == nil {
		return nil, fmt.Errorf("%s: runtime not started", cmd.Op)
	}
	switch cmd.Op {
	case "start":
		if h.r != nil {
			return nil, fmt.Errorf("already started")
		}
		return map[string]any{}, h.start()
	case "descriptor":
		// api.proto as compiled into NRI's Go code, to compare with Tidal's generated Python
		b, err := proto.Marshal(protodesc.ToFileDescriptorProto(api.File_pkg_api_api_proto))
		return map[string]any{"file_descriptor_proto": b}, err
	case "dump":
		pods, ctrs := []json.RawMessage{}, []json.RawMessage{}
		for _, p := range h.pods {
			pods = append(pods, raw(p))
		}
		for _, id := range h.order {
			if c, ok := h.containers[id]; ok {
				ctrs = append(ctrs, raw(c))
			}
		}
		return map[string]any{"pods": pods, "containers": ctrs}, nil
	case "restore":
		for _, b := range cmd.Pods {
			pod := &api.PodSandbox{}
			if err := unmarshal(b, pod, "pod"); err != nil {
				return nil, err
			}
			h.pods[pod.Id] = pod
		}
		for _, b := range cmd.Containers {
			ctr := &api.Container{}
			if err := unmarshal(b, ctr, "container"); err != nil {
				return nil, err
			}
			h.containers[ctr.Id] = ctr
			h.order = append(h.order, ctr.Id)
		}
		return map[string]any{}, nil
	case "stop":
		h.r.Stop()
		h.r = nil
		return map[string]any{}, nil
	case "wait_plugins":
		timeout := time.Duration(cmd.TimeoutMs) * time.Millisecond
		got, err := h.waitPlugins(cmd.N, timeout)
		return map[string]any{"plugins": got}, err
	case "run_pod":
		pod := &api.PodSandbox{}
		if err := unmarshal(cmd.Pod, pod, "pod"); err != nil {
			return nil, err
		}
		h.pods[pod.Id] = pod
		return map[string]any{}, h.r.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod})
	case "create":
		pod, ok := h.pods[cmd.PodID]
		if !ok {
			return nil, fmt.Errorf("unknown pod %q", cmd.PodID)
		}
		ctr := &api.Container{}
		if err := unmarshal(cmd.Container, ctr, "container"); err != nil {
			return nil, err
		}
		ctr.PodSandboxId = pod.Id
		start := time.Now()
		rpl, err := h.r.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: ctr})
		elapsed := time.Since(start)
		if err != nil {
			return nil, err
		}
		// Remember the container as created, with the adjusted resources, for Synchronize.
		if rpl.GetAdjust().GetLinux().GetResources() != nil {
			if ctr.Linux == nil {
				ctr.Linux = &api.LinuxContainer{}
			}
			ctr.Linux.Resources = rpl.Adjust.Linux.Resources
		}
		ctr.State = api.ContainerState_CONTAINER_CREATED
		h.containers[ctr.Id] = ctr
		h.order = append(h.order, ctr.Id)
		// as a runtime does once the container exists
		if err := h.r.PostCreateContainer(ctx, &api.PostCreateContainerRequest{Pod: pod, Container: ctr}); err != nil {
			return nil, err
		}
		ctr.State = api.ContainerState_CONTAINER_RUNNING
		return map[string]any{"adjust": raw(rpl.Adjust), "update": rawList(rpl.Update), "evict": rawList(rpl.Evict),
			"elapsed_ns": elapsed.Nanoseconds()}, nil
	case "update":
		ctr, ok := h.containers[cmd.ContainerID]
		if !ok {
			return nil, fmt.Errorf("unknown container %q", cmd.ContainerID)
		}
		res := &api.LinuxResources{}
		if err := unmarshal(cmd.Resources, res, "resources"); err != nil {
			return nil, err
		}
		rpl, err := h.r.UpdateContainer(ctx, &api.UpdateContainerRequest{Pod: h.pods[ctr.PodSandboxId], Container: ctr, LinuxResources: res})
		if err != nil {
			return nil, err
		}
		return map[string]any{"update": rawList(rpl.Update), "evict": rawList(rpl.Evict)}, nil
	case "stop_container":
		ctr, ok := h.containers[cmd.ContainerID]
		if !ok {
			return nil, fmt.Errorf("unknown container %q", cmd.ContainerID)
		}
		rpl, err := h.r.StopContainer(ctx, &api.StopContainerRequest{Pod: h.pods[ctr.PodSandboxId], Container: ctr})
		if err != nil {
			return nil, err
		}
		ctr.State = api.ContainerState_CONTAINER_STOPPED
		return map[string]any{"update": rawList(rpl.Update)}, nil
	case "stop_pod", "remove_pod":
		pod, ok := h.pods[cmd.PodID]
		if !ok {
			return nil, fmt.Errorf("unknown pod %q", cmd.PodID)
		}
		if cmd.Op == "stop_pod" {
			return map[string]any{}, h.r.StopPodSandbox(ctx, &api.StopPodSandboxRequest{Pod: pod})
		}
		delete(h.pods, pod.Id)
		return map[string]any{}, h.r.RemovePodSandbox(ctx, &api.RemovePodSandboxRequest{Pod: pod})
	case "bench":
		pod, ok := h.pods[cmd.PodID]
		if !ok {
			return nil, fmt.Errorf("unknown pod %q", cmd.PodID)
		}
		tmpl := &api.Container{}
		if err := unmarshal(cmd.Container, tmpl, "container"); err != nil {
			return nil, err
		}
		durations := make([]int64, 0, cmd.N)
		for i := 0; i < cmd.N; i++ {
			ctr := proto.Clone(tmpl).(*api.Container)
			ctr.Id = fmt.Sprintf("%s-%d", tmpl.Id, i)
			ctr.PodSandboxId = pod.Id
			start := time.Now()
			if _, err := h.r.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: ctr}); err != nil {
				return nil, err
			}
			durations = append(durations, time.Since(start).Nanoseconds())
		}
		return map[string]any{"durations_ns": durations, "plugins": h.m.plugins()}, nil
	case "exit":
		if h.r != nil {
			h.r.Stop()
		}
		h.emit(map[string]any{"op": "exit", "ok": true})
		os.Exit(0)
	}
	return nil, fmt.Errorf("unknown op %q", cmd.Op)
}

func main() {
	socket := flag.String("socket", "", "NRI socket to listen on")
	requestTimeout := flag.Duration("request-timeout", 2*time.Second, "plugin request timeout")
	registrationTimeout := flag.Duration("registration-timeout", 5*time.Second, "plugin registration timeout")
	flag.Parse()
	if *socket == "" {
		fmt.Fprintln(os.Stderr, "harness: -socket is required")
		os.Exit(2)
	}
	log.Set(&stderrLogger{})
	adaptation.SetPluginRequestTimeout(*requestTimeout)
	adaptation.SetPluginRegistrationTimeout(*registrationTimeout)

	h := &harness{socket: *socket, out: json.NewEncoder(os.Stdout),
		pods: map[string]*api.PodSandbox{}, containers: map[string]*api.Container{}}
	h.emit(map[string]any{"event": "ready", "socket": *socket})
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	for in.Scan() {
		var cmd command
		if err := json.Unmarshal(in.Bytes(), &cmd); err != nil {
			h.emit(map[string]any{"ok": false, "error": "bad command: " + err.Error()})
			continue
		}
		result, err := h.do(cmd)
		if result == nil {
			result = map[string]any{}
		}
		result["op"] = cmd.Op
		result["ok"] = err == nil
		if err != nil {
			result["error"] = err.Error()
		}
		h.emit(result)
	}
	if h.r != nil {
		h.r.Stop()
	}
}

type stderrLogger struct{}

func (stderrLogger) Debugf(context.Context, string, ...interface{}) {}
func (stderrLogger) Infof(_ context.Context, f string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "nri: "+f+"\n", a...)
}
func (stderrLogger) Warnf(_ context.Context, f string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "nri: warning: "+f+"\n", a...)
}
func (stderrLogger) Errorf(_ context.Context, f string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "nri: error: "+f+"\n", a...)
}

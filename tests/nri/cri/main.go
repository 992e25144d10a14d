// Command nri-cri is a minimal CRI client (crictl's module is not available from the Go module
// proxy here): it runs one host-network pod sandbox and one container in it through containerd's
// CRI service and prints their ids as JSON; -update updates a container's resources as the
// kubelet does; -cleanup stops and removes a pod. Used by tests/nri/test_nri_containerd.py.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	endpoint := flag.String("endpoint", "", "containerd socket")
	annotations := flag.String("pod-annotations", "{}", "pod annotations (JSON)")
	image := flag.String("image", "", "container image")
	name := flag.String("name", "tidal-nri", "pod name")
	uid := flag.String("uid", "tidal-nri-uid", "pod uid")
	cgroupParent := flag.String("cgroup-parent", "", "pod cgroup parent")
	cleanup := flag.String("cleanup", "", "pod sandbox id to stop and remove")
	update := flag.String("update", "", "container id to update as the kubelet does a BestEffort container (shares 2, no limits)")
	inPod := flag.String("in-pod", "", "create the container in this running pod sandbox (the same -name, -uid, -pod-annotations and -cgroup-parent) instead of a new one")
	attempt := flag.Uint("attempt", 0, "the container's attempt (a kubelet restarting a container creates attempt 1, 2, ...)")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+*endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fail(err)
	}
	rt := cri.NewRuntimeServiceClient(conn)

	if *update != "" {
		_, err := rt.UpdateContainerResources(ctx, &cri.UpdateContainerResourcesRequest{
			ContainerId: *update,
			Linux:       &cri.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000},
		})
		if err != nil {
			fail(fmt.Errorf("UpdateContainerResources: %w", err))
		}
		emit(map[string]any{"updated": *update})
		return
	}
	if *cleanup != "" {
		if _, err := rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: *cleanup}); err != nil {
			fail(err)
		}
		if _, err := rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: *cleanup}); err != nil {
			fail(err)
		}
		emit(map[string]any{"removed": *cleanup})
		return
	}

	ann := map[string]string{}
	if err := json.Unmarshal([]byte(*annotations), &ann); err != nil {
		fail(err)
	}
	podConfig := &cri.PodSandboxConfig{
		Metadata:    &cri.PodSandboxMetadata{Name: *name, Uid: *uid, Namespace: "tidal-nri-test"},
		Annotations: ann,
		Linux: &cri.LinuxPodSandboxConfig{
			CgroupParent:    *cgroupParent,
			SecurityContext: &cri.LinuxSandboxSecurityContext{NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE}},
		},
	}
	pod := &cri.RunPodSandboxResponse{PodSandboxId: *inPod}
	if *inPod == "" {
		pod, err = rt.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: podConfig})
		if err != nil {
			fail(fmt.Errorf("RunPodSandbox: %w", err))
		}
	}
	ctr, err := rt.CreateContainer(ctx, &cri.CreateContainerRequest{
		PodSandboxId:  pod.PodSandboxId,
		SandboxConfig: podConfig,
		Config: &cri.ContainerConfig{
			Metadata: &cri.ContainerMetadata{Name: "worker", Attempt: uint32(*attempt)},
			Image:    &cri.ImageSpec{Image: *image},
			Command:  []string{"/sleeper"},
			Linux:    &cri.LinuxContainerConfig{Resources: &cri.LinuxContainerResources{CpuShares: 2}},
		},
	})
	if err != nil {
		emit(map[string]any{"pod": pod.PodSandboxId, "error": fmt.Sprintf("CreateContainer: %v", err)})
		os.Exit(1)
	}
	if _, err := rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		emit(map[string]any{"pod": pod.PodSandboxId, "container": ctr.ContainerId, "error": fmt.Sprintf("StartContainer: %v", err)})
		os.Exit(1)
	}
	emit(map[string]any{"pod": pod.PodSandboxId, "container": ctr.ContainerId})
}

func emit(v any) { json.NewEncoder(os.Stdout).Encode(v) }

func fail(err error) {
	emit(map[string]any{"error": err.Error()})
	os.Exit(1)
}

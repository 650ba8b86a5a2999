// Command check reads Kubernetes manifests (the output of `helm template`, several YAML documents) and says what
// an API server would refuse, without one: each object is decoded strictly into its Kubernetes API type (k8s.io/api,
// and the prometheus-operator's for ServiceMonitor and PrometheusRule), so an unknown or misspelt field, a value of
// the wrong type or a kind it does not know is an error; then what ties the objects together is checked: names and
// labels Kubernetes accepts, selectors that select, ports, volumes and ConfigMaps that are there.
//
//	helm template mirrorwatch deploy/helm/mirrorwatch | check
//
// Prints one line per problem ("Deployment/x: ...") and exits 1, or a summary of the objects and exits 0.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The kinds a chart of ours may render, each with its API type.
var kinds = map[string]func() any{
	"v1/ConfigMap":                            func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                               func() any { return &corev1.Secret{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                       func() any { return &corev1.ServiceAccount{} },
	"apps/v1/Deployment":                      func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return &monitoringv1.PrometheusRule{} },
}

// A ConfigMap holds at most 1 MiB (etcd's limit on an object, less its metadata).
const configMapLimit = 1 << 20

type rendered struct {
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	configMaps      map[string]*corev1.ConfigMap
	pdbs            []*policyv1.PodDisruptionBudget
	serviceMonitors []*monitoringv1.ServiceMonitor
	rules           []*monitoringv1.PrometheusRule
	count           map[string]int
	unreadable      int // objects that could not be decoded: what selects them cannot be judged
}

func main() {
	problems, summary, err := check(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "check:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "check: %d problem(s)\n", len(problems))
		os.Exit(1)
	}
	fmt.Println(summary)
}

func check(in io.Reader) ([]string, string, error) {
	r := rendered{configMaps: map[string]*corev1.ConfigMap{}, count: map[string]int{}}
	var problems []string
	seen := map[string]bool{}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(in))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, "", err
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var meta struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			problems = append(problems, fmt.Sprintf("a document that is not an object: %v", err))
			continue
		}
		id := fmt.Sprintf("%s/%s", meta.Kind, meta.Metadata.Name)
		newObject, known := kinds[meta.APIVersion+"/"+meta.Kind]
		if !known {
			problems = append(problems, fmt.Sprintf("%s: unknown kind %s/%s", id, meta.APIVersion, meta.Kind))
			continue
		}
		if seen[id] {
			problems = append(problems, fmt.Sprintf("%s: rendered twice", id))
		}
		seen[id] = true
		obj := newObject()
		asJSON, err := yaml.YAMLToJSON(doc)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", id, err))
			continue
		}
		// as the API server decodes a request: a field of the wrong type is an error, an unknown or repeated
		// field a strict error with its path (the object is still read, so its ties are checked too)
		strict, err := kjson.UnmarshalStrict(asJSON, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", id, err))
			r.unreadable++
			continue
		}
		for _, e := range strict {
			problems = append(problems, fmt.Sprintf("%s: %v", id, e))
		}
		r.count[meta.Kind]++
		problems = append(problems, prefixed(id, objectMeta(meta.Metadata))...)
		switch o := obj.(type) {
		case *appsv1.Deployment:
			r.deployments = append(r.deployments, o)
		case *corev1.Service:
			r.services = append(r.services, o)
		case *corev1.ConfigMap:
			r.configMaps[o.Name] = o
		case *policyv1.PodDisruptionBudget:
			r.pdbs = append(r.pdbs, o)
		case *monitoringv1.ServiceMonitor:
			r.serviceMonitors = append(r.serviceMonitors, o)
		case *monitoringv1.PrometheusRule:
			r.rules = append(r.rules, o)
		}
	}
	if r.unreadable == 0 {
		problems = append(problems, r.ties()...)
	} else {
		problems = append(problems, fmt.Sprintf("(%d object(s) could not be read: selectors, ports and volumes are checked once every object reads)", r.unreadable))
	}
	var kindsSeen []string
	for kind, n := range r.count {
		kindsSeen = append(kindsSeen, fmt.Sprintf("%d %s", n, kind))
	}
	sort.Strings(kindsSeen)
	return problems, "ok: " + strings.Join(kindsSeen, ", "), nil
}

func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out.Write(line)
			out.WriteByte('\n')
		}
	}
	return out.Bytes()
}

func prefixed(id string, problems []string) []string {
	for i, p := range problems {
		problems[i] = id + ": " + p
	}
	return problems
}

// What the API server's validation of metadata refuses: names, label keys and values.
func objectMeta(m metav1.ObjectMeta) []string {
	var problems []string
	for _, msg := range validation.IsDNS1123Subdomain(m.Name) {
		problems = append(problems, fmt.Sprintf("metadata.name %q: %s", m.Name, msg))
	}
	problems = append(problems, labelProblems("metadata.labels", m.Labels)...)
	return problems
}

func labelProblems(where string, set map[string]string) []string {
	var problems []string
	for k, v := range set {
		for _, msg := range validation.IsQualifiedName(k) {
			problems = append(problems, fmt.Sprintf("%s key %q: %s", where, k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			problems = append(problems, fmt.Sprintf("%s[%q] %q: %s", where, k, v, msg))
		}
	}
	return problems
}

func selector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Nothing(), nil
	}
	return metav1.LabelSelectorAsSelector(s)
}

// What ties the objects together.
func (r rendered) ties() []string {
	var problems []string
	for _, d := range r.deployments {
		problems = append(problems, prefixed("Deployment/"+d.Name, r.deployment(d))...)
	}
	for _, s := range r.services {
		problems = append(problems, prefixed("Service/"+s.Name, r.service(s))...)
	}
	for _, p := range r.pdbs {
		sel, err := selector(p.Spec.Selector)
		if err != nil || len(r.podsOf(sel)) == 0 {
			problems = append(problems, fmt.Sprintf("PodDisruptionBudget/%s: its selector selects no Deployment's pods", p.Name))
		}
	}
	for _, sm := range r.serviceMonitors {
		problems = append(problems, prefixed("ServiceMonitor/"+sm.Name, r.serviceMonitor(sm))...)
	}
	for name, cm := range r.configMaps {
		size := 0
		for k, v := range cm.Data {
			size += len(k) + len(v)
		}
		if size > configMapLimit {
			problems = append(problems, fmt.Sprintf("ConfigMap/%s: %d bytes of data, more than a ConfigMap holds", name, size))
		}
	}
	for _, pr := range r.rules {
		if len(pr.Spec.Groups) == 0 {
			problems = append(problems, fmt.Sprintf("PrometheusRule/%s: no rule groups", pr.Name))
		}
	}
	return problems
}

func (r rendered) deployment(d *appsv1.Deployment) []string {
	var problems []string
	sel, err := selector(d.Spec.Selector)
	switch {
	case err != nil:
		problems = append(problems, fmt.Sprintf("spec.selector: %v", err))
	case sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)):
		problems = append(problems, "spec.selector does not select its own template's labels")
	}
	problems = append(problems, labelProblems("spec.template.metadata.labels", d.Spec.Template.Labels)...)
	pod := d.Spec.Template.Spec
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
		if v.ConfigMap != nil && r.configMaps[v.ConfigMap.Name] == nil {
			problems = append(problems, fmt.Sprintf("volume %s: ConfigMap %s is not rendered", v.Name, v.ConfigMap.Name))
		}
	}
	if len(pod.Containers) == 0 {
		problems = append(problems, "no containers")
	}
	for _, c := range pod.Containers {
		where := "container " + c.Name
		if c.Image == "" {
			problems = append(problems, where+": no image")
		}
		ports := map[string]bool{}
		for _, p := range c.Ports {
			if p.Name != "" {
				for _, msg := range validation.IsValidPortName(p.Name) {
					problems = append(problems, fmt.Sprintf("%s: port name %q: %s", where, p.Name, msg))
				}
				ports[p.Name] = true
			}
			for _, msg := range validation.IsValidPortNum(int(p.ContainerPort)) {
				problems = append(problems, fmt.Sprintf("%s: containerPort %d: %s", where, p.ContainerPort, msg))
			}
		}
		for name, probe := range map[string]*corev1.Probe{"livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe} {
			if probe == nil {
				continue
			}
			var port string
			switch {
			case probe.HTTPGet != nil:
				port = probe.HTTPGet.Port.StrVal
			case probe.TCPSocket != nil:
				port = probe.TCPSocket.Port.StrVal
			}
			if port != "" && !ports[port] {
				problems = append(problems, fmt.Sprintf("%s: %s names port %q, which it does not have", where, name, port))
			}
		}
		for _, m := range c.VolumeMounts {
			if _, ok := volumes[m.Name]; !ok {
				problems = append(problems, fmt.Sprintf("%s: volumeMount %s: no such volume", where, m.Name))
			}
			if v, ok := volumes[m.Name]; ok && v.ConfigMap != nil && m.SubPath != "" {
				if cm := r.configMaps[v.ConfigMap.Name]; cm != nil {
					if _, has := cm.Data[m.SubPath]; !has {
						problems = append(problems, fmt.Sprintf("%s: volumeMount %s: ConfigMap %s has no key %s", where, m.Name, cm.Name, m.SubPath))
					}
				}
			}
		}
	}
	return problems
}

// The Deployments whose pods a selector selects.
func (r rendered) podsOf(sel labels.Selector) []*appsv1.Deployment {
	var found []*appsv1.Deployment
	for _, d := range r.deployments {
		if !sel.Empty() && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			found = append(found, d)
		}
	}
	return found
}

func (r rendered) service(s *corev1.Service) []string {
	if len(s.Spec.Selector) == 0 {
		return []string{"no selector"}
	}
	pods := r.podsOf(labels.SelectorFromSet(s.Spec.Selector))
	if len(pods) == 0 {
		return []string{"its selector selects no Deployment's pods"}
	}
	var problems []string
	for _, port := range s.Spec.Ports {
		if port.TargetPort.StrVal == "" {
			continue
		}
		for _, d := range pods {
			if !hasPort(d, port.TargetPort.StrVal) {
				problems = append(problems, fmt.Sprintf("port %s: targetPort %q is not a port of Deployment/%s", port.Name, port.TargetPort.StrVal, d.Name))
			}
		}
	}
	return problems
}

func hasPort(d *appsv1.Deployment, name string) bool {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

func (r rendered) serviceMonitor(sm *monitoringv1.ServiceMonitor) []string {
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil {
		return []string{fmt.Sprintf("spec.selector: %v", err)}
	}
	var selected []*corev1.Service
	for _, s := range r.services {
		if !sel.Empty() && sel.Matches(labels.Set(s.Labels)) {
			selected = append(selected, s)
		}
	}
	if len(selected) == 0 {
		return []string{"its selector selects no Service"}
	}
	var problems []string
	for i, ep := range sm.Spec.Endpoints {
		for _, s := range selected {
			found := false
			for _, p := range s.Spec.Ports {
				found = found || p.Name == ep.Port
			}
			if !found {
				problems = append(problems, fmt.Sprintf("endpoints[%d]: port %q is not a port of Service/%s", i, ep.Port, s.Name))
			}
		}
	}
	return problems
}

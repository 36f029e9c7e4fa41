package cluster

import (
	"fmt"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/hashicorp/memberlist"
)

// memberlist v0.6.0 keeps each node's state (alive, suspect, dead, left) and
// the time it changed in an unexported nodeState, and exports neither: the
// Node handed to delegates and returned by Members() never carries it
// (Node.State stays zero), and suspicion fires no event. tether's API and
// formation need suspect and left, so stateReader reads memberlist's node map
// under memberlist's own lock. It locates the fields with reflect and checks,
// field by field, that the layout is the one mirrored below; on any
// difference (another memberlist version) it is disabled and membership falls
// back to events only (no suspect; dead and left both reported dead), with a
// warning at Open. TestStateReaderMatchesMemberlist fails in that case.

// mlNodeState mirrors memberlist's nodeState.
type mlNodeState struct {
	memberlist.Node
	Incarnation uint32
	State       memberlist.NodeStateType
	StateChange time.Time
}

type stateReader struct {
	lock    *sync.RWMutex
	nodeMap reflect.Value // memberlist's map[string]*nodeState
}

// nodeObs is one node as memberlist's state says.
type nodeObs struct {
	name  string
	addr  string
	meta  []byte
	state State
	since time.Time
}

func newStateReader(ml *memberlist.Memberlist) (*stateReader, error) {
	v := reflect.ValueOf(ml).Elem()
	t := v.Type()
	lockF, ok := t.FieldByName("nodeLock")
	if !ok || lockF.Type != reflect.TypeFor[sync.RWMutex]() {
		return nil, fmt.Errorf("memberlist.Memberlist has no nodeLock sync.RWMutex")
	}
	mapF, ok := t.FieldByName("nodeMap")
	if !ok || mapF.Type.Kind() != reflect.Map || mapF.Type.Key().Kind() != reflect.String ||
		mapF.Type.Elem().Kind() != reflect.Pointer {
		return nil, fmt.Errorf("memberlist.Memberlist has no nodeMap map[string]*nodeState")
	}
	if err := sameLayout(mapF.Type.Elem().Elem(), reflect.TypeFor[mlNodeState]()); err != nil {
		return nil, err
	}
	base := unsafe.Pointer(v.UnsafeAddr())
	return &stateReader{
		lock:    (*sync.RWMutex)(unsafe.Add(base, lockF.Offset)),
		nodeMap: reflect.NewAt(mapF.Type, unsafe.Add(base, mapF.Offset)).Elem(),
	}, nil
}

// sameLayout checks that got (memberlist's nodeState) has exactly want's
// fields, in order, at the same offsets and of the same types.
func sameLayout(got, want reflect.Type) error {
	if got.Kind() != reflect.Struct || got.Size() != want.Size() || got.NumField() != want.NumField() {
		return fmt.Errorf("memberlist nodeState layout changed (%s, %d bytes)", got, got.Size())
	}
	for i := range want.NumField() {
		g, w := got.Field(i), want.Field(i)
		if g.Name != w.Name || g.Offset != w.Offset || g.Type != w.Type {
			return fmt.Errorf("memberlist nodeState field %d is %s %s at %d, want %s %s at %d",
				i, g.Name, g.Type, g.Offset, w.Name, w.Type, w.Offset)
		}
	}
	return nil
}

// read returns every node memberlist knows, with its state. It takes
// memberlist's read lock: never call it from a memberlist delegate.
func (r *stateReader) read() []nodeObs {
	r.lock.RLock()
	defer r.lock.RUnlock()
	out := make([]nodeObs, 0, r.nodeMap.Len())
	it := r.nodeMap.MapRange()
	for it.Next() {
		ns := (*mlNodeState)(it.Value().UnsafePointer())
		if ns == nil {
			continue
		}
		out = append(out, nodeObs{
			name:  ns.Name,
			addr:  ns.Address(),
			meta:  append([]byte(nil), ns.Meta...),
			state: fromMemberlist(ns.State),
			since: ns.StateChange,
		})
	}
	return out
}

func fromMemberlist(s memberlist.NodeStateType) State {
	switch s {
	case memberlist.StateAlive:
		return StateAlive
	case memberlist.StateSuspect:
		return StateSuspect
	case memberlist.StateLeft:
		return StateLeft
	}
	return StateDead
}

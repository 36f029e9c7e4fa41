package command

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// SetConfig commits a new version of the cluster's configuration: Content,
// the ReverseProxy section of a config file as JSON. The FSM numbers it
// (the current version plus one); with IfVersion set, it refuses unless the
// current version is IfVersion, and changes nothing. At is the commit time
// (the cluster time the leader read); Summary says what it holds and what
// changed, for the history.
type SetConfig struct {
	ReqID     string
	IfVersion uint64
	Content   []byte
	Summary   string
	At        time.Time
}

func (SetConfig) isCommand() {}

// Bounds of a configuration version.
const (
	MaxConfigContent = 1 << 20
	maxConfigSummary = 1024
)

type wireConfig struct {
	ReqID     string          `json:"req"`
	IfVersion uint64          `json:"if_version,omitempty"`
	Content   json.RawMessage `json:"content"`
	Summary   string          `json:"summary"`
	At        time.Time       `json:"at"`
}

func encodeConfig(c SetConfig) ([]byte, error) {
	b, err := json.Marshal(wireConfig{c.ReqID, c.IfVersion, json.RawMessage(c.Content), c.Summary, c.At.Round(0).UTC()})
	if err != nil {
		return nil, err
	}
	out := append([]byte{TypeSetConfig, commandSpecs[TypeSetConfig].version}, b...)
	if _, err := decodeConfig(out[1], out[2:]); err != nil { // refuse to log what no node could apply
		return nil, err
	}
	return out, nil
}

func decodeConfig(ver byte, body []byte) (Command, error) {
	if ver != commandSpecs[TypeSetConfig].version {
		return nil, fmt.Errorf("command type %d: body version %d, want %d", TypeSetConfig, ver, commandSpecs[TypeSetConfig].version)
	}
	var w wireConfig
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, fmt.Errorf("command type %d: %w", TypeSetConfig, err)
	}
	var err error
	switch {
	case w.ReqID == "" || len(w.ReqID) > maxReqIDLen:
		err = fmt.Errorf("request id of %d bytes, want 1-%d", len(w.ReqID), maxReqIDLen)
	case len(w.Content) == 0 || len(w.Content) > MaxConfigContent:
		err = fmt.Errorf("content of %d bytes, want 1-%d", len(w.Content), MaxConfigContent)
	case len(bytes.TrimSpace(w.Content)) == 0 || bytes.TrimSpace(w.Content)[0] != '{':
		err = errors.New("content is not a JSON object")
	case len(w.Summary) > maxConfigSummary:
		err = fmt.Errorf("summary of %d bytes, at most %d", len(w.Summary), maxConfigSummary)
	case w.At.IsZero():
		err = errors.New("set config: time is zero")
	}
	if err != nil {
		return nil, fmt.Errorf("command type %d: %w", TypeSetConfig, err)
	}
	return SetConfig{w.ReqID, w.IfVersion, bytes.Clone(w.Content), w.Summary, w.At.UTC()}, nil
}

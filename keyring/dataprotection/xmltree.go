package dataprotection

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Limits on one XML document (a key file, or a decrypted secret). Key files
// are a few kilobytes; anything beyond these is not a key file.
const (
	maxXMLBytes    = 1 << 20
	maxXMLDepth    = 32
	maxXMLElements = 10000
)

// element is a parsed XML element: just what key files need (names with
// their namespace, attributes, and children in order, text included).
type element struct {
	space, local string
	attrs        []xml.Attr
	nodes        []node
}

// node is a child: an element, or character data when el is nil.
type node struct {
	el   *element
	text string
}

// parseXML reads one document with encoding/xml (no DTDs, no external
// entities) within the limits above.
func parseXML(data []byte) (*element, error) {
	if len(data) > maxXMLBytes {
		return nil, fmt.Errorf("XML document larger than %d bytes", maxXMLBytes)
	}
	// .NET's XmlWriter (XElement.Save, as FileSystemXmlRepository writes key
	// files) starts the file with a UTF-8 byte order mark.
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	d := xml.NewDecoder(bytes.NewReader(data))
	d.Strict = true
	var (
		stack []*element
		root  *element
		count int
	)
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if root != nil && len(stack) == 0 {
				return nil, errors.New("more than one root element")
			}
			if len(stack) >= maxXMLDepth {
				return nil, fmt.Errorf("XML nested deeper than %d", maxXMLDepth)
			}
			if count++; count > maxXMLElements {
				return nil, fmt.Errorf("more than %d XML elements", maxXMLElements)
			}
			e := &element{space: t.Name.Space, local: t.Name.Local, attrs: append([]xml.Attr(nil), t.Attr...)}
			if len(stack) == 0 {
				root = e
			} else {
				p := stack[len(stack)-1]
				p.nodes = append(p.nodes, node{el: e})
			}
			stack = append(stack, e)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				p := stack[len(stack)-1]
				p.nodes = append(p.nodes, node{text: string(t)})
			} else if len(bytes.TrimSpace(t)) > 0 {
				return nil, errors.New("text outside the root element")
			}
		case xml.Directive:
			return nil, errors.New("XML directives (DTDs) are not allowed")
		}
	}
	if root == nil {
		return nil, errors.New("no root element")
	}
	return root, nil
}

// children returns the child elements called local (any namespace).
func (e *element) children(local string) []*element {
	var out []*element
	for _, n := range e.nodes {
		if n.el != nil && n.el.local == local {
			out = append(out, n.el)
		}
	}
	return out
}

// child returns the first child element called local, or nil.
func (e *element) child(local string) *element {
	for _, n := range e.nodes {
		if n.el != nil && n.el.local == local {
			return n.el
		}
	}
	return nil
}

// elements returns every child element.
func (e *element) elements() []*element {
	var out []*element
	for _, n := range e.nodes {
		if n.el != nil {
			out = append(out, n.el)
		}
	}
	return out
}

// attr returns the attribute called local in no namespace.
func (e *element) attr(local string) (string, bool) {
	for _, a := range e.attrs {
		if a.Name.Local == local && a.Name.Space == "" {
			return a.Value, true
		}
	}
	return "", false
}

// text is the concatenated character data of e and its descendants, as
// .NET's (string)XElement.
func (e *element) text() string {
	var b strings.Builder
	var walk func(*element)
	walk = func(x *element) {
		for _, n := range x.nodes {
			if n.el != nil {
				walk(n.el)
			} else {
				b.WriteString(n.text)
			}
		}
	}
	walk(e)
	return b.String()
}

// requiredChild is child, or an error naming what is missing.
func (e *element) requiredChild(local string) (*element, error) {
	c := e.child(local)
	if c == nil {
		return nil, fmt.Errorf("<%s> has no <%s>", e.local, local)
	}
	return c, nil
}

// childAttr is the attribute attr of the required child named local.
func (e *element) childAttr(local, attr string) (string, error) {
	c, err := e.requiredChild(local)
	if err != nil {
		return "", err
	}
	return c.requiredAttr(attr)
}

// requiredAttr is attr, or an error naming what is missing.
func (e *element) requiredAttr(local string) (string, error) {
	v, ok := e.attr(local)
	if !ok {
		return "", fmt.Errorf("<%s> has no %s attribute", e.local, local)
	}
	return v, nil
}

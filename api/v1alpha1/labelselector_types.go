package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// LabelSelector selects objects by their labels. It is metav1.LabelSelector,
// field for field and the same in JSON, with bounds on its lists, maps and
// strings: they let the CRD's validation rules check every key, operator and
// value at admission (a rule over metav1.LabelSelector's unbounded lists is
// refused by the API server's cost estimate), so that a selector the API
// server accepts is one that parses. The manager still holds, and never
// removes on, a stored selector that does not parse (one written before
// these rules).
//
// +structType=atomic
type LabelSelector struct {
	// MatchLabels selects the objects that have each label, key and value.
	// Keys are label keys: an optional DNS subdomain prefix and "/", then a
	// name of at most 63 characters. Values are label values.
	//
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !format.qualifiedName().validate(k).hasValue())",message="keys must be label keys: an optional DNS subdomain prefix and '/', then a name of at most 63 characters that begins and ends with a letter or digit, with '-', '_' or '.' inside"
	// +optional
	MatchLabels map[string]LabelValue `json:"matchLabels,omitempty"`
	// MatchExpressions are requirements on labels, all of which must hold.
	//
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelSelectorRequirement is a requirement on one label:
// metav1.LabelSelectorRequirement, with bounds.
//
// +kubebuilder:validation:XValidation:rule="self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 : !has(self.values) || size(self.values) == 0",message="values must be set for In and NotIn, and empty for Exists and DoesNotExist"
type LabelSelectorRequirement struct {
	// Key is the label key.
	//
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:XValidation:rule="!format.qualifiedName().validate(self).hasValue()",message="must be a label key: an optional DNS subdomain prefix and '/', then a name of at most 63 characters that begins and ends with a letter or digit, with '-', '_' or '.' inside"
	Key string `json:"key"`
	// Operator is In, NotIn, Exists or DoesNotExist.
	//
	// +kubebuilder:validation:Enum=In;NotIn;Exists;DoesNotExist
	Operator metav1.LabelSelectorOperator `json:"operator"`
	// Values are the label values for In and NotIn; Exists and
	// DoesNotExist take none.
	//
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`
	// +listType=atomic
	// +optional
	Values []string `json:"values,omitempty"`
}

// LabelValue is a label value. It is a type of its own, rather than a
// string, so that the CRD can bound and check the values of
// LabelSelector.MatchLabels.
//
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`
type LabelValue string

// AsSelector is s as a labels.Selector, as metav1.LabelSelectorAsSelector
// makes it: a nil s selects nothing, an empty one everything.
func (s *LabelSelector) AsSelector() (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(s.asMeta())
}

// asMeta is s as a metav1.LabelSelector; nil when s is.
func (s *LabelSelector) asMeta() *metav1.LabelSelector {
	if s == nil {
		return nil
	}
	m := &metav1.LabelSelector{}
	if s.MatchLabels != nil {
		m.MatchLabels = make(map[string]string, len(s.MatchLabels))
		for k, v := range s.MatchLabels {
			m.MatchLabels[k] = string(v)
		}
	}
	for _, r := range s.MatchExpressions {
		m.MatchExpressions = append(m.MatchExpressions, metav1.LabelSelectorRequirement{Key: r.Key, Operator: r.Operator, Values: r.Values})
	}
	return m
}

// SetAsLabelSelector is the selector of the objects that have every label
// of ls, as metav1.SetAsLabelSelector makes it; nil when ls is.
func SetAsLabelSelector(ls labels.Set) *LabelSelector {
	if ls == nil {
		return nil
	}
	s := &LabelSelector{MatchLabels: make(map[string]LabelValue, len(ls))}
	for k, v := range ls {
		s.MatchLabels[k] = LabelValue(v)
	}
	return s
}

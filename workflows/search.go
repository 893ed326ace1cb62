package workflows

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// Custom search attributes: the Temporal UI's search box filters on them
// (RoundhouseRun = "demo", RoundhouseSuccessRate > 0.5).
var (
	RunAttr         = temporal.NewSearchAttributeKeyKeyword("RoundhouseRun")
	KindAttr        = temporal.NewSearchAttributeKeyKeyword("RoundhouseKind") // train, episodes, eval, sweep
	RoundAttr       = temporal.NewSearchAttributeKeyInt64("RoundhouseRound")
	PhaseAttr       = temporal.NewSearchAttributeKeyKeyword("RoundhousePhase")
	WeightsAttr     = temporal.NewSearchAttributeKeyKeyword("RoundhouseWeights")
	SuccessRateAttr = temporal.NewSearchAttributeKeyFloat64("RoundhouseSuccessRate")
)

// searchAttributes is what RegisterSearchAttributes creates.
var searchAttributes = map[string]enumspb.IndexedValueType{
	RunAttr.GetName():         enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	KindAttr.GetName():        enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	RoundAttr.GetName():       enumspb.INDEXED_VALUE_TYPE_INT,
	PhaseAttr.GetName():       enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	WeightsAttr.GetName():     enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	SuccessRateAttr.GetName(): enumspb.INDEXED_VALUE_TYPE_DOUBLE,
}

// RegisterSearchAttributes adds Roundhouse's search attributes to the
// namespace unless they exist; workers and the starter call it at start so
// no one has to run `temporal operator search-attribute create` by hand.
func RegisterSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	have, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("list search attributes of namespace %s: %w", namespace, err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range searchAttributes {
		got, ok := have.CustomAttributes[name]
		if !ok {
			missing[name] = typ
			continue
		}
		if got != typ {
			return fmt.Errorf("search attribute %s exists in namespace %s as %s, Roundhouse needs %s: remove it (temporal operator search-attribute remove --name %s)", name, namespace, got, typ, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: namespace, SearchAttributes: missing})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("add search attributes to namespace %s (on Temporal Cloud, create them in the namespace's settings): %w", namespace, err)
	}
	return nil
}

"""Records (named features, categories, missing values) encoded into rows through a model's vocabulary."""

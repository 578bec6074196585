assertions = [
  assert_called: 2,
  assert_called: 3,
  refute_called: 2,
  refute_called: 3,
  assert_returned: 3,
  assert_returned: 4,
  assert_raised_in: 3,
  assert_raised_in: 4,
  assert_raised_in: 5,
  assert_called_in_order: 2,
  assert_called_in_order: 3
]

[
  inputs: ["{mix,.formatter}.exs", "{config,lib,test,bench,demo,mix}/**/*.{ex,exs}"],
  locals_without_parens: assertions,
  export: [locals_without_parens: assertions]
]

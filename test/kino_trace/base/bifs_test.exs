defmodule KinoTrace.Base.BifsTest do
  use ExUnit.Case, async: true

  doctest KinoTrace.Base.Bifs
end

import { describe, it, expect } from "vitest";
import { splitCall } from "../src/log_view.js";

// A narrow log cuts a call's arguments, then its module, never its function (issue 25).
describe("splitCall", () => {
  it("splits an Elixir or Erlang call into module, function and arguments", () => {
    expect(splitCall("KinoTraceTest.Remote.Echo.double(1)")).toEqual(["KinoTraceTest.Remote.Echo.", "double", "(1)", ""]);
    expect(splitCall(":ets.insert(#Reference<0.1.2.3>, {:a, 1})")).toEqual([":ets.", "insert", "(#Reference<0.1.2.3>, {:a, 1})", ""]);
    expect(splitCall("Enum.map/2")).toEqual(["Enum.", "map/2", "", ""]);
  });

  it("keeps dots inside the arguments with the arguments", () => {
    expect(splitCall("Map.get(%{a: 1.5}, :a)")).toEqual(["Map.", "get", "(%{a: 1.5}, :a)", ""]);
  });

  // issue 39 item 1: the whole text was "arguments", so "in Enum.reduce/3" gave way first
  it("keeps where a function the compiler made was made apart from its arguments", () => {
    expect(splitCall("anonymous fn([1, 2], 0) in Enum.sum/1")).toEqual(["", "anonymous fn", "([1, 2], 0)", " in Enum.sum/1"]);
    expect(splitCall('anonymous fn("a) in b", 0) in Enum.reduce/3')).toEqual(["", "anonymous fn", '("a) in b", 0)', " in Enum.reduce/3"]);
    expect(splitCall("anonymous fn() in Enum.sum/1")).toEqual(["", "anonymous fn", "()", " in Enum.sum/1"]);
  });

  it("keeps any other text that names no module's function whole", () => {
    expect(splitCall("some text (1)")).toEqual(["", "", "some text (1)", ""]);
    expect(splitCall("double(1)")).toEqual(["", "double", "(1)", ""]);
    expect(splitCall("")).toEqual(["", "", "", ""]);
  });
});

defmodule KinoTraceTest.WireSchema do
  @moduledoc false
  # Checks the trace widget's payloads against the wire's one schema,
  # assets/wire.schema.json (the JS tests check app.js's reads against the same file).
  #
  # A payload is checked as the browser gets it: JSON-encoded, then decoded. The schema
  # uses a small part of JSON Schema: type (one or a list), enum, minimum, properties,
  # required, additionalProperties (false or a schema), items, anyOf and local $ref.

  @path Path.expand("../../assets/wire.schema.json", __DIR__)
  @external_resource @path
  @schema @path |> File.read!() |> JSON.decode!()

  @doc "The schema, decoded."
  def schema, do: @schema

  @doc "Raises unless `payload` is a valid connect payload."
  def check_connect!(payload), do: check!(payload, @schema["connect"], "connect")

  @doc "Raises unless `payload` is a valid payload of the browser event `event`."
  def check_event!(event, payload) do
    case @schema["events"] do
      %{^event => schema} ->
        check!(payload, schema, event)

      events ->
        raise "the wire schema has no event #{inspect(event)} (it has #{inspect(Map.keys(events))})"
    end
  end

  @doc """
  Checks each `{:broadcast | :reply, event, payload}` effect; others are skipped. A
  snapshot view's event (`"view"`, KinoTrace.Widget.Views) is checked, then the event
  it carries.
  """
  def check_effects!(effects) do
    for {kind, event, payload} <- effects,
        kind in [:broadcast, :reply],
        do: check_event!(event, payload)

    for {kind, "view", %{event: event, payload: payload}} <- effects,
        kind in [:broadcast, :reply],
        do: check_event!(event, payload)

    :ok
  end

  defp check!(payload, schema, name) do
    json = payload |> JSON.encode!() |> JSON.decode!()

    case errors(json, schema, name) do
      [] ->
        :ok

      errors ->
        raise ExUnit.AssertionError,
              "the #{name} payload does not follow assets/wire.schema.json:\n  " <>
                Enum.join(errors, "\n  ")
    end
  end

  defp errors(value, %{"$ref" => "#/$defs/" <> def}, path),
    do: errors(value, Map.fetch!(@schema["$defs"], def), path)

  defp errors(value, %{"anyOf" => options}, path) do
    all = Enum.map(options, &errors(value, &1, path))

    if Enum.any?(all, &(&1 == [])),
      do: [],
      else: ["#{path}: matches none of its forms: " <> Enum.join(List.flatten(all), "; ")]
  end

  defp errors(value, schema, path) do
    with [] <- type_errors(value, schema["type"], path),
         [] <- enum_errors(value, schema["enum"], path),
         [] <- minimum_errors(value, schema["minimum"], path) do
      object_errors(value, schema, path) ++ array_errors(value, schema, path)
    end
  end

  defp type_errors(_value, nil, _path), do: []

  defp type_errors(value, types, path) do
    if Enum.any?(List.wrap(types), &type?(value, &1)),
      do: [],
      else: ["#{path}: expected #{Enum.join(List.wrap(types), " or ")}, got #{inspect(value)}"]
  end

  defp type?(value, "object"), do: is_map(value)
  defp type?(value, "array"), do: is_list(value)
  defp type?(value, "string"), do: is_binary(value)
  defp type?(value, "integer"), do: is_integer(value)
  defp type?(value, "number"), do: is_number(value)
  defp type?(value, "boolean"), do: is_boolean(value)
  defp type?(value, "null"), do: is_nil(value)

  defp enum_errors(_value, nil, _path), do: []

  defp enum_errors(value, enum, path),
    do:
      if(value in enum,
        do: [],
        else: ["#{path}: #{inspect(value)} is not one of #{inspect(enum)}"]
      )

  defp minimum_errors(value, min, path) when is_number(value) and is_number(min) and value < min,
    do: ["#{path}: #{value} is less than #{min}"]

  defp minimum_errors(_value, _min, _path), do: []

  defp object_errors(value, schema, path) when is_map(value) do
    properties = Map.get(schema, "properties", %{})

    missing =
      for key <- Map.get(schema, "required", []),
          not Map.has_key?(value, key),
          do: "#{path}: no #{key}"

    fields =
      Enum.flat_map(value, fn {key, field} ->
        case {properties, schema["additionalProperties"]} do
          {%{^key => property}, _} -> errors(field, property, "#{path}.#{key}")
          {_, false} -> ["#{path}: #{key} is not in the schema"]
          {_, additional} when is_map(additional) -> errors(field, additional, "#{path}.#{key}")
          _ -> []
        end
      end)

    missing ++ fields
  end

  defp object_errors(_value, _schema, _path), do: []

  defp array_errors(value, %{"items" => items}, path) when is_list(value) do
    value
    |> Enum.with_index()
    |> Enum.flat_map(fn {item, i} -> errors(item, items, "#{path}[#{i}]") end)
  end

  defp array_errors(_value, _schema, _path), do: []
end

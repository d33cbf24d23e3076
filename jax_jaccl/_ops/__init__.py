"""One module per primitive: public function, abstract eval, lowering, AD and batching rules."""
